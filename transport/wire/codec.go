package wire

import (
	"errors"
	"fmt"
	"reflect"

	"github.com/fxamacker/cbor/v2"
)

// Errors of Decode. Each wraps the detail of what was wrong.
var (
	ErrMalformed   = errors.New("malformed message")
	ErrMissingType = errors.New("message has no type")
	ErrTooLarge    = errors.New("message too large")
)

// MaxNesting bounds how deeply a frame's CBOR may nest. A protocol message
// needs three levels; application payloads travel as byte strings and are
// not parsed here.
const MaxNesting = 8

var (
	decMode cbor.DecMode
	encMode cbor.EncMode
)

func init() {
	tags := cbor.NewTagSet()
	// Tag 64 is the RFC 8746 typed array of uint8: accept it around data.
	if err := tags.Add(
		cbor.TagOptions{DecTag: cbor.DecTagOptional, EncTag: cbor.EncTagNone},
		reflect.TypeOf(Bytes(nil)), 64,
	); err != nil {
		panic(err)
	}
	var err error
	decMode, err = cbor.DecOptions{
		MaxNestedLevels:  MaxNesting,
		MaxArrayElements: 4096,
		MaxMapPairs:      4096,
		// A protocol message is a map with string keys; anything else is
		// rejected instead of coerced.
		DefaultMapType: reflect.TypeOf(map[string]any(nil)),
		UTF8:           cbor.UTF8RejectInvalid,
	}.DecModeWithTags(tags)
	if err != nil {
		panic(err)
	}
	encMode, err = cbor.EncOptions{}.EncModeWithTags(tags)
	if err != nil {
		panic(err)
	}
}

// Decode parses one frame. It checks the CBOR shape and that a type is
// present; what each type requires is checked by Validate.
func Decode(frame []byte) (*Message, error) {
	var m Message
	if err := decMode.Unmarshal(frame, &m); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if m.Type == "" {
		return nil, ErrMissingType
	}
	return &m, nil
}

// Encode returns the CBOR encoding of m.
func Encode(m *Message) ([]byte, error) {
	return encMode.Marshal(m)
}

// Prepared is a message encoded once for many recipients: everything but
// its targetId, which To adds for each. A CBOR map's keys have no order,
// so the targetId pair goes first and the rest is copied as it is.
type Prepared struct {
	pairs int    // key/value pairs in body
	body  []byte // the pairs, without the map's header
}

// Prepare encodes m, whose TargetID must be empty, for To.
func Prepare(m *Message) (*Prepared, error) {
	if m.TargetID != "" {
		return nil, errors.New("wire: prepare a message without its targetId")
	}
	b, err := encMode.Marshal(m)
	if err != nil {
		return nil, err
	}
	// A message has a handful of fields: its header is one byte for up to
	// 23 pairs (major type 5), two for more.
	switch h := b[0]; {
	case h >= 0xa0 && h <= 0xb7:
		return &Prepared{pairs: int(h - 0xa0), body: b[1:]}, nil
	case h == 0xb8:
		return &Prepared{pairs: int(b[1]), body: b[2:]}, nil
	}
	return nil, fmt.Errorf("wire: unexpected map header 0x%x", b[0])
}

const targetKey = "targetId"

// To returns the frame of the prepared message addressed to targetID.
func (p *Prepared) To(targetID string) []byte {
	n := p.pairs + 1
	out := make([]byte, 0, 2+1+len(targetKey)+9+len(targetID)+len(p.body))
	if n <= 23 {
		out = append(out, 0xa0+byte(n))
	} else {
		out = append(out, 0xb8, byte(n))
	}
	out = appendText(out, targetKey)
	out = appendText(out, targetID)
	return append(out, p.body...)
}

// appendText appends s as a CBOR text string (major type 3).
func appendText(b []byte, s string) []byte {
	switch n := uint64(len(s)); {
	case n <= 23:
		b = append(b, 0x60+byte(n))
	case n <= 0xff:
		b = append(b, 0x78, byte(n))
	case n <= 0xffff:
		b = append(b, 0x79, byte(n>>8), byte(n))
	case n <= 0xffffffff:
		b = append(b, 0x7a, byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
	default:
		b = append(b, 0x7b, byte(n>>56), byte(n>>48), byte(n>>40), byte(n>>32), byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
	}
	return append(b, s...)
}
