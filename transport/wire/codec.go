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
