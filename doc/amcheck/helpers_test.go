package amcheck

import "errors"

func isTooLarge(err error) bool  { return errors.Is(err, ErrTooLarge) }
func isMalformed(err error) bool { return errors.Is(err, ErrMalformed) }
