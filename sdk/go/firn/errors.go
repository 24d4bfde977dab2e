package firn

import (
	"errors"
	"strconv"
)

// The causes a host call can fail with; test with errors.Is(err, firn.ErrLimit).
var (
	// ErrLimit: the run passed one of its limits (writes, bytes written, host calls). The
	// run cannot go on usefully; return non-zero.
	ErrLimit = errors.New("a limit of the run was exceeded")
	// ErrNotAllowed: the key is under _firn/ (Firn's own), or outside the rights of the user
	// the run acts for (FCALL's caller, a trigger's creator).
	ErrNotAllowed = errors.New("not allowed")
	// ErrRead: a read could not be answered (or answered in a shape this SDK does not
	// understand); the run's view is incomplete, so return non-zero.
	ErrRead = errors.New("the read failed")
)

// The host's answer codes (negative results of a host call).
const (
	codeAbsent     = -1
	codeTooSmall   = -2
	codeLimit      = -3
	codeNotAllowed = -4
	codeRead       = -5
)

// Error is a failed host call: which call, on which key (stream, channel, prefix), and why.
type Error struct {
	Op  string // "get", "put", "xadd" …
	Key string
	Err error // ErrLimit, ErrNotAllowed, ErrRead, or an unknown code
}

func (e *Error) Error() string {
	return "firn: " + e.Op + " " + strconv.Quote(e.Key) + ": " + e.Err.Error()
}

func (e *Error) Unwrap() error { return e.Err }

// unknownCode is a code this SDK predates; it is kept so the caller can log it.
type unknownCode int64

func (c unknownCode) Error() string { return "host error " + strconv.FormatInt(int64(c), 10) }

func hostError(op, key string, code int64) error {
	var cause error
	switch code {
	case codeLimit:
		cause = ErrLimit
	case codeNotAllowed:
		cause = ErrNotAllowed
	case codeRead:
		cause = ErrRead
	default:
		cause = unknownCode(code)
	}
	return &Error{Op: op, Key: key, Err: cause}
}
