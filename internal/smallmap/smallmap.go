package smallmap

import "iter"

// spill is how many entries a Map keeps in its slice: past it, a map.
const spill = 8

type entry[K comparable, V any] struct {
	k K
	v V
}

// Map is a map for few entries. Its zero value is empty and ready.
// It is not safe for concurrent use.
type Map[K comparable, V any] struct {
	small []entry[K, V]
	big   map[K]V // non-nil once the entries outgrew small
}

// Len is the number of entries.
func (m *Map[K, V]) Len() int {
	if m.big != nil {
		return len(m.big)
	}
	return len(m.small)
}

func (m *Map[K, V]) index(k K) int {
	for i := range m.small {
		if m.small[i].k == k {
			return i
		}
	}
	return -1
}

// Get returns k's value and whether k is there.
func (m *Map[K, V]) Get(k K) (V, bool) {
	if m.big != nil {
		v, ok := m.big[k]
		return v, ok
	}
	if i := m.index(k); i >= 0 {
		return m.small[i].v, true
	}
	var zero V
	return zero, false
}

// Has reports whether k is there.
func (m *Map[K, V]) Has(k K) bool {
	_, ok := m.Get(k)
	return ok
}

// Set sets k's value.
func (m *Map[K, V]) Set(k K, v V) {
	if m.big != nil {
		m.big[k] = v
		return
	}
	if i := m.index(k); i >= 0 {
		m.small[i].v = v
		return
	}
	if len(m.small) < spill {
		if m.small == nil {
			m.small = make([]entry[K, V], 0, 1)
		}
		m.small = append(m.small, entry[K, V]{k, v})
		return
	}
	m.big = make(map[K]V, 2*spill)
	for _, e := range m.small {
		m.big[e.k] = e.v
	}
	m.big[k] = v
	m.small = nil
}

// Delete removes k. The map stays a map once it was one.
func (m *Map[K, V]) Delete(k K) {
	if m.big != nil {
		delete(m.big, k)
		return
	}
	i := m.index(k)
	if i < 0 {
		return
	}
	last := len(m.small) - 1
	m.small[i] = m.small[last]
	m.small[last] = entry[K, V]{} // no reference kept
	m.small = m.small[:last]
	if last == 0 {
		m.small = nil
	}
}

// All yields the entries, in no fixed order. Deleting the entry just
// yielded is safe within the loop, as it is with a map; what other sets
// and deletes within the loop do to it is not defined.
func (m *Map[K, V]) All() iter.Seq2[K, V] {
	return func(yield func(K, V) bool) {
		if m.big != nil {
			for k, v := range m.big {
				if !yield(k, v) {
					return
				}
			}
			return
		}
		// Backwards: a deleted entry's place takes the last one, which
		// was yielded already.
		small := m.small
		for i := len(small) - 1; i >= 0; i-- {
			if m.big == nil && i >= len(m.small) {
				continue // shrunk by deletes within the loop
			}
			e := small[i]
			if !yield(e.k, e.v) {
				return
			}
		}
	}
}

// Keys yields the keys, as All does.
func (m *Map[K, V]) Keys() iter.Seq[K] {
	return func(yield func(K) bool) {
		for k := range m.All() {
			if !yield(k) {
				return
			}
		}
	}
}
