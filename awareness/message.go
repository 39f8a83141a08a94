package awareness

import (
	"errors"
	"fmt"
	"reflect"
	"sync"

	"github.com/fxamacker/cbor/v2"
)

// Message is an ephemeral message as presence sees it: its sender, the
// sender's (SessionID, Count) clock, and Data, the CBOR payload.
type Message struct {
	SenderID  string
	SessionID string
	Count     uint64
	Data      []byte
	// Shared is the same for every recipient of one message the hub
	// sends: a transport may keep there what it derives from the message
	// once for all of them (its encoded frame). Nil on received messages.
	Shared *Shared
}

// Shared carries what a transport computes once per message sent to many
// peers. Peers may take the same message at once: Once guards Frame.
type Shared struct {
	Once  sync.Once
	Frame any
}

// Batcher is a Peer that may take many presence messages of one document
// in one frame (Delivery.Batch). PresenceBatches says whether this one
// does (a client asks for it when it joins).
type Batcher interface {
	Peer
	PresenceBatches() bool
}

// Batch is presence messages of one document, in the order sent, that
// members that take batches are sent as one: the same Batch, and so the
// same frame, for every member that takes the same messages at once. It
// may hold messages in the recipient's own name, which the recipient
// ignores.
type Batch struct {
	Messages []Message
	Shared   *Shared
}

// Types of automerge-repo Presence messages.
const (
	TypeSnapshot  = "snapshot"
	TypeUpdate    = "update"
	TypeHeartbeat = "heartbeat"
	TypeGoodbye   = "goodbye"
)

// Well-known channels. Any other channel is kept and relayed as it is.
const (
	ChannelUser   = "user"   // {id, name, color}
	ChannelStatus = "status" // "online" or "away"
	ChannelTyping = "typing" // truthy while typing
)

// ErrBadPresence is returned for an ephemeral payload that is not
// well-formed CBOR, or whose __presence is not one of the Presence
// message types.
var ErrBadPresence = errors.New("bad presence message")

// ErrPresenceLimit is returned for a presence message that would give its
// peer more channels or bytes than the hub allows (Config.MaxChannels,
// MaxStateBytes), or that names a channel longer than
// MaxChannelNameBytes. It wraps ErrBadPresence.
var ErrPresenceLimit = fmt.Errorf("%w: over a presence limit", ErrBadPresence)

// MaxUserIDBytes bounds the id a user channel names (a token's sub
// otherwise): a user's id is a key of the last-seen and history stores,
// of watch subscriptions and of Redis keys, which refuse or choke on long
// ones (bbolt's keys end at 32 KiB, a PostgreSQL index row at 8 KiB).
const MaxUserIDBytes = 256

// MaxChannelNameBytes bounds the name of a presence channel. Names are
// words an application picks (cursor, selection, color), and each one is
// held for its peer and sent to every newcomer.
const MaxChannelNameBytes = 128

// DefaultMaxNesting is how deeply a presence payload may nest unless
// Config.MaxNesting says otherwise; MinNesting and MaxNesting bound what
// it may say.
const (
	DefaultMaxNesting = 16
	MinNesting        = 4
	MaxNesting        = 64
)

// presenceMessage is the value under "__presence".
type presenceMessage struct {
	Type    string                     `cbor:"type"`
	Channel string                     `cbor:"channel,omitempty"`
	Value   cbor.RawMessage            `cbor:"value,omitempty"`
	State   map[string]cbor.RawMessage `cbor:"state,omitempty"`
	// whole marks a snapshot the hub sends that holds every channel of
	// its peer (feed.go). Not encoded.
	whole bool
}

// presenceMarker is the key of a presence payload's one entry, as
// automerge-repo's Presence names it (envelope's tag spells it too).
const presenceMarker = "__presence"

type envelope struct {
	Presence *presenceMessage `cbor:"__presence"`
}

var (
	decMode cbor.DecMode
	encMode cbor.EncMode
)

func init() {
	var err error
	// Values are checked on the way in, at the hub's depth: read them back
	// at any depth a hub may allow.
	decMode, err = newDecMode(MaxNesting)
	if err != nil {
		panic(err)
	}
	encMode, err = cbor.EncOptions{}.EncMode()
	if err != nil {
		panic(err)
	}
}

// newDecMode returns a decoder for presence payloads nested at most
// maxNesting deep.
func newDecMode(maxNesting int) (cbor.DecMode, error) {
	return cbor.DecOptions{
		MaxNestedLevels: maxNesting,
		MaxMapPairs:     1024,
		DefaultMapType:  reflect.TypeOf(map[string]any(nil)),
	}.DecMode()
}

// parsePresence returns the presence message in an ephemeral payload, or
// nil if the payload is not presence (an application's own ephemeral).
// dm bounds the nesting, and reads the whole payload: a payload within it
// is either presence or not, never "not presence" because a second
// decoder of another depth could not read it.
func parsePresence(dm cbor.DecMode, data []byte) (*presenceMessage, error) {
	if err := dm.Wellformed(data); err != nil {
		return nil, fmt.Errorf("%w: payload is not well-formed CBOR nested at most %d deep: %v", ErrBadPresence, dm.DecOptions().MaxNestedLevels, err)
	}
	raw, err := presenceIn(data)
	if err != nil || raw == nil {
		return nil, err // nil, nil: not presence
	}
	var m presenceMessage
	if err := dm.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadPresence, err)
	}
	switch m.Type {
	case TypeHeartbeat, TypeGoodbye:
	case TypeUpdate:
		if m.Channel == "" || len(m.Value) == 0 {
			return nil, fmt.Errorf("%w: update needs a channel and a value", ErrBadPresence)
		}
	case TypeSnapshot:
		if m.State == nil {
			return nil, fmt.Errorf("%w: snapshot needs a state map", ErrBadPresence)
		}
	default:
		return nil, fmt.Errorf("%w: unknown type %q", ErrBadPresence, m.Type)
	}
	return &m, nil
}

// presenceIn returns the value of the __presence key of a payload's
// top-level map, as a stock client reads it: nil if there is none, the
// last if there are several. The key is a text string spelled exactly so,
// its length written in any of CBOR's widths (cbor-x reads them all, and
// no indefinite-length string); other keys, of any type, are the
// application's.
//
// It refuses a payload that a client's decoder could read as an object
// with keys its top-level map does not spell out: a map or an array under
// a tag (cbor-x reads tag 55799 as nothing, records and packed or bundled
// strings as objects), or a map key under a tag (shared and packed
// strings). An application's ephemeral is relayed as it came, so one such
// payload would reach the other peers as presence the hub never checked:
// another user's name, say. Tags elsewhere (a date, a typed array, a
// value inside the map) are the application's own. data is well-formed.
func presenceIn(data []byte) ([]byte, error) {
	i, tagged := 0, false
	for i < len(data) && data[i]>>5 == 6 {
		_, i, _ = cborHead(data, i)
		tagged = true
	}
	if i >= len(data) {
		return nil, fmt.Errorf("%w: a tag with no item", ErrBadPresence)
	}
	switch major := data[i] >> 5; {
	case tagged && (major == 4 || major == 5):
		return nil, fmt.Errorf("%w: a map or array under a tag at the top of an ephemeral payload", ErrBadPresence)
	case major != 5:
		return nil, nil // not a map: not presence
	}
	var value []byte
	n, i, indefinite := cborHead(data, i)
	for k := uint64(0); indefinite || k < n; k++ {
		if i >= len(data) {
			return nil, fmt.Errorf("%w: a map cut short", ErrBadPresence)
		}
		if indefinite && data[i] == 0xff {
			break
		}
		if data[i]>>5 == 6 {
			return nil, fmt.Errorf("%w: a map key under a tag at the top of an ephemeral payload", ErrBadPresence)
		}
		isPresence := false
		if data[i]>>5 == 3 { // a text string: its bytes, whatever its head's length
			size, at, chunked := cborHead(data, i)
			isPresence = !chunked && size == uint64(len(presenceMarker)) && at+len(presenceMarker) <= len(data) &&
				string(data[at:at+len(presenceMarker)]) == presenceMarker
		}
		var ok bool
		if i, ok = cborSkip(data, i); !ok {
			return nil, fmt.Errorf("%w: a map cut short", ErrBadPresence)
		}
		start := i
		if i, ok = cborSkip(data, i); !ok {
			return nil, fmt.Errorf("%w: a map cut short", ErrBadPresence)
		}
		if isPresence {
			value = data[start:i:i]
		}
	}
	return value, nil
}

// cborHead reads the head of the item at data[i]: its argument (a
// length, a tag number, a value) and where what follows it starts, or
// that its length is indefinite. It reports next = len(data) for a head
// cut short.
func cborHead(data []byte, i int) (arg uint64, next int, indefinite bool) {
	ai := data[i] & 0x1f
	i++
	switch {
	case ai < 24:
		return uint64(ai), i, false
	case ai <= 27:
		n := 1 << (ai - 24)
		if i+n > len(data) {
			return 0, len(data), false
		}
		for _, b := range data[i : i+n] {
			arg = arg<<8 | uint64(b)
		}
		return arg, i + n, false
	case ai == 31:
		return 0, i, true
	}
	return 0, len(data), false // 28-30 are not well-formed
}

// cborSkip returns where the item at data[i] ends, or false if it runs
// past data.
func cborSkip(data []byte, i int) (int, bool) {
	for i < len(data) && data[i]>>5 == 6 { // tags, in a loop: their depth is the payload's length
		_, i, _ = cborHead(data, i)
	}
	if i >= len(data) {
		return 0, false
	}
	major := data[i] >> 5
	arg, i, indefinite := cborHead(data, i)
	switch major {
	case 0, 1, 7: // integers, simple values and floats: the head is all
		return i, i <= len(data)
	case 2, 3:
		if !indefinite {
			if arg > uint64(len(data)-i) {
				return 0, false
			}
			return i + int(arg), true
		}
	case 5:
		if !indefinite {
			if arg > uint64(len(data)) {
				return 0, false
			}
			arg *= 2
		}
	}
	// An array, a map, or the chunks of an indefinite string, each item
	// at least a byte.
	for k := uint64(0); indefinite || k < arg; k++ {
		if i >= len(data) {
			return 0, false
		}
		if indefinite && data[i] == 0xff {
			return i + 1, true
		}
		var ok bool
		if i, ok = cborSkip(data, i); !ok {
			return 0, false
		}
	}
	return i, true
}

// encodePresence returns the payload of an outbound presence message.
func encodePresence(m *presenceMessage) []byte {
	b, err := encMode.Marshal(envelope{Presence: m})
	if err != nil {
		panic(err) // raw values were checked on the way in
	}
	return b
}

var cborFalse = []byte{0xf4}

// truthy reports whether a CBOR value is true in JavaScript's sense, for
// the common falsy encodings: false, null, undefined, 0 and "".
func truthy(v []byte) bool {
	if len(v) != 1 {
		return len(v) > 1
	}
	switch v[0] {
	case 0xf4, 0xf6, 0xf7, 0x00, 0x60:
		return false
	}
	return true
}

// decodeValue turns a CBOR value into JSON-friendly Go values.
func decodeValue(v []byte) any {
	var out any
	if err := decMode.Unmarshal(v, &out); err != nil {
		return nil
	}
	return jsonable(out)
}

// jsonable converts maps with non-string keys, which encoding/json
// rejects, into maps with string keys.
func jsonable(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = jsonable(e)
		}
		return x
	case map[any]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[fmt.Sprint(k)] = jsonable(e)
		}
		return out
	case []any:
		for i, e := range x {
			x[i] = jsonable(e)
		}
		return x
	case cbor.SimpleValue:
		return nil // undefined
	}
	return v
}

// The status channel's values, encoded once: status is recomputed for every
// peer on every tick.
var (
	cborOnline = append([]byte{0x60 + byte(len(StatusOnline))}, StatusOnline...) // text "online"
	cborAway   = append([]byte{0x60 + byte(len(StatusAway))}, StatusAway...)     // text "away"
)
