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
		MaxArrayElements: MaxBatchEntries,
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

// MaxBatchEntries bounds the entries of a presence batch, as Decode bounds
// every array: a sender splits more into several batches.
const MaxBatchEntries = 4096

// Encode returns the CBOR encoding of m.
func Encode(m *Message) ([]byte, error) {
	return encMode.Marshal(m)
}

// Prepared is a message encoded once for many recipients: everything but
// its targetId, which To adds for each. A CBOR map's keys have no order,
// so the targetId pair goes first, then the rest as it was encoded, and
// the data pair last: its bytes are the message's own, never copied, so
// that a document's worth of sync message is held once however many
// peers it goes to.
type Prepared struct {
	pairs int    // key/value pairs in body, the data pair included
	body  []byte // the pairs but data's, without the map's header
	data  []byte // Data; nil if empty
}

// Prepare encodes m, whose TargetID must be empty, for To. m.Data is
// kept, not copied: it must not change while the frames are in use.
func Prepare(m *Message) (*Prepared, error) {
	if m.TargetID != "" {
		return nil, errors.New("wire: prepare a message without its targetId")
	}
	rest := *m
	rest.Data = nil
	b, err := encMode.Marshal(&rest)
	if err != nil {
		return nil, err
	}
	var p *Prepared
	// A message has a handful of fields: its header is one byte for up to
	// 23 pairs (major type 5), two for more.
	switch h := b[0]; {
	case h >= 0xa0 && h <= 0xb7:
		p = &Prepared{pairs: int(h - 0xa0), body: b[1:]}
	case h == 0xb8:
		p = &Prepared{pairs: int(b[1]), body: b[2:]}
	default:
		return nil, fmt.Errorf("wire: unexpected map header 0x%x", b[0])
	}
	if len(m.Data) > 0 {
		p.pairs++
		p.data = m.Data
	}
	return p, nil
}

const (
	targetKey = "targetId"
	dataKey   = "data"
)

// To returns the frame of the prepared message addressed to targetID, in
// two parts: the frame is head followed by data, which is the message's
// Data itself.
func (p *Prepared) To(targetID string) (head, data []byte) {
	return p.appendHead(make([]byte, 0, p.Len(targetID)-len(p.data)), targetID), p.data
}

// Frame returns the prepared message addressed to targetID as one slice.
func (p *Prepared) Frame(targetID string) []byte {
	return p.AppendFrame(make([]byte, 0, p.Len(targetID)), targetID)
}

// AppendFrame appends the prepared message addressed to targetID to b:
// Len(targetID) bytes.
func (p *Prepared) AppendFrame(b []byte, targetID string) []byte {
	return append(p.appendHead(b, targetID), p.data...)
}

// Len is the length of the prepared message addressed to targetID.
func (p *Prepared) Len(targetID string) int {
	n := 1
	if p.pairs+1 > 23 {
		n = 2
	}
	n += textLen(targetKey) + textLen(targetID) + len(p.body)
	if p.data != nil {
		n += textLen(dataKey) + headLen(uint64(len(p.data))) + len(p.data)
	}
	return n
}

// textLen is the length of s as a CBOR text string.
func textLen(s string) int { return headLen(uint64(len(s))) + len(s) }

// headLen is the length of the head of a CBOR item whose argument is n
// (appendHead).
func headLen(n uint64) int {
	switch {
	case n <= 23:
		return 1
	case n <= 0xff:
		return 2
	case n <= 0xffff:
		return 3
	case n <= 0xffffffff:
		return 5
	}
	return 9
}

func (p *Prepared) appendHead(head []byte, targetID string) []byte {
	if n := p.pairs + 1; n <= 23 {
		head = append(head, 0xa0+byte(n))
	} else {
		head = append(head, 0xb8, byte(n))
	}
	head = appendText(head, targetKey)
	head = appendText(head, targetID)
	head = append(head, p.body...)
	if p.data != nil {
		head = appendText(head, dataKey)
		head = appendHead(head, 0x40, uint64(len(p.data))) // a byte string
	}
	return head
}

// appendText appends s as a CBOR text string (major type 3).
func appendText(b []byte, s string) []byte {
	return append(appendHead(b, 0x60, uint64(len(s))), s...)
}

// appendHead appends the head of a CBOR item of major type major (its
// top three bits, as 0x40 for a byte string) and argument n.
func appendHead(b []byte, major byte, n uint64) []byte {
	switch {
	case n <= 23:
		return append(b, major+byte(n))
	case n <= 0xff:
		return append(b, major+24, byte(n))
	case n <= 0xffff:
		return append(b, major+25, byte(n>>8), byte(n))
	case n <= 0xffffffff:
		return append(b, major+26, byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
	}
	return append(b, major+27, byte(n>>56), byte(n>>48), byte(n>>40), byte(n>>32), byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
}

// AppendBatchEntry appends one entry of a presence batch, as Encode
// writes a BatchEntry: a message encoded once can so join many batches.
func AppendBatchEntry(b []byte, senderID string, count uint64, data []byte) []byte {
	b = append(b, 0x83) // an array of three
	b = appendText(b, senderID)
	b = appendHead(b, 0x00, count)
	b = appendHead(b, 0x40, uint64(len(data)))
	return append(b, data...)
}

// AppendBatch appends a presence batch (TypePresenceBatch) from senderID
// about documentID under sessionID, whose entries are each encoded by
// AppendBatchEntry: what Encode writes for the same message.
func AppendBatch(b []byte, senderID, documentID, sessionID string, entries [][]byte) []byte {
	pairs := 1 // type
	for _, s := range []string{senderID, documentID, sessionID} {
		if s != "" {
			pairs++
		}
	}
	if len(entries) > 0 {
		pairs++
	}
	b = append(b, 0xa0+byte(pairs))
	b = appendText(appendText(b, "type"), TypePresenceBatch)
	for _, kv := range [][2]string{{"senderId", senderID}, {"documentId", documentID}, {"sessionId", sessionID}} {
		if kv[1] != "" {
			b = appendText(appendText(b, kv[0]), kv[1])
		}
	}
	if len(entries) > 0 {
		b = appendHead(appendText(b, "batch"), 0x80, uint64(len(entries)))
		for _, e := range entries {
			b = append(b, e...)
		}
	}
	return b
}
