//go:build !unix

package transport

// readWhenReady takes a buffer from the pool and reads into it.
func (f *frameConn) readWhenReady() (int, error) { return f.getBufferAndRead() }
