package wire

import (
	"bytes"
	"crypto/sha256"
	"errors"
)

// ErrInvalidDocumentID is returned for a documentId that is not the base58check
// encoding of a 16-byte document UUID.
var ErrInvalidDocumentID = errors.New("invalid document id")

const base58Alphabet = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"

var base58Index = func() (idx [256]int8) {
	for i := range idx {
		idx[i] = -1
	}
	for i := 0; i < len(base58Alphabet); i++ {
		idx[base58Alphabet[i]] = int8(i)
	}
	return idx
}()

// maxDocumentIDLen is the longest base58 text of 20 bytes.
const maxDocumentIDLen = 28

// ValidateDocumentID checks that id is an automerge-repo document id:
// base58 (Bitcoin alphabet) of a 16-byte UUID followed by the first four
// bytes of its double SHA-256.
func ValidateDocumentID(id string) error {
	if len(id) == 0 || len(id) > maxDocumentIDLen {
		return ErrInvalidDocumentID
	}
	raw, ok := decodeBase58(id)
	if !ok || len(raw) != 20 {
		return ErrInvalidDocumentID
	}
	first := sha256.Sum256(raw[:16])
	second := sha256.Sum256(first[:])
	if !bytes.Equal(second[:4], raw[16:]) {
		return ErrInvalidDocumentID
	}
	return nil
}

// NewDocumentID encodes a 16-byte UUID as a document id.
func NewDocumentID(uuid [16]byte) string {
	first := sha256.Sum256(uuid[:])
	second := sha256.Sum256(first[:])
	return encodeBase58(append(uuid[:], second[:4]...))
}

func decodeBase58(s string) ([]byte, bool) {
	// Little-endian base-256 digits of the number, grown as needed.
	var num []byte
	for i := 0; i < len(s); i++ {
		d := base58Index[s[i]]
		if d < 0 {
			return nil, false
		}
		carry := int(d)
		for j := range num {
			carry += int(num[j]) * 58
			num[j] = byte(carry)
			carry >>= 8
		}
		for carry > 0 {
			num = append(num, byte(carry))
			carry >>= 8
		}
	}
	zeros := 0
	for zeros < len(s) && s[zeros] == '1' {
		zeros++
	}
	out := make([]byte, zeros, zeros+len(num))
	for i := len(num) - 1; i >= 0; i-- {
		out = append(out, num[i])
	}
	return out, true
}

func encodeBase58(b []byte) string {
	var digits []byte // little-endian base-58 digits
	for _, c := range b {
		carry := int(c)
		for j := range digits {
			carry += int(digits[j]) << 8
			digits[j] = byte(carry % 58)
			carry /= 58
		}
		for carry > 0 {
			digits = append(digits, byte(carry%58))
			carry /= 58
		}
	}
	out := make([]byte, 0, len(b)*138/100+1)
	for _, c := range b {
		if c != 0 {
			break
		}
		out = append(out, '1')
	}
	for i := len(digits) - 1; i >= 0; i-- {
		out = append(out, base58Alphabet[digits[i]])
	}
	return string(out)
}
