//go:build !unix

package transport

// readWhenReady takes a buffer from the pool and reads into it.
func (f *frameConn) readWhenReady() (int, error) { return f.getBufferAndRead() }

// readNow cannot read without waiting here; nothing parks.
func (f *frameConn) readNow() (int, error) { return 0, errWouldBlock }

// tryWrite cannot write without waiting here: ok is false, and the writer
// writes as it does for every frame.
func (f *frameConn) tryWrite([]byte) (n int, ok bool, err error) { return 0, false, nil }

// initRaw has nothing to keep here.
func (f *frameConn) initRaw() {}
