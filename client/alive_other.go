//go:build !unix

package client

// alive reports whether idle connection c still looks open; where the
// socket cannot be peeked at, only its buffer is looked at.
func (c *dataConn) alive() bool { return c.r.Buffered() == 0 }
