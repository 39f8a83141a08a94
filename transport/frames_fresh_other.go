//go:build !unix

package transport

// fresh reads into a buffer taken from the pool.
func (f *frameConn) fresh() (int, error) { return f.freshRead() }
