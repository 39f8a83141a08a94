package sqlargs

import (
	"strconv"
	"strings"
)

// Numbered rewrites query's ? placeholders to $1, $2, … in order.
func Numbered(query string) string {
	var b strings.Builder
	b.Grow(len(query) + 8)
	n := 0
	for _, r := range query {
		if r == '?' {
			n++
			b.WriteByte('$')
			b.WriteString(strconv.Itoa(n))
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}
