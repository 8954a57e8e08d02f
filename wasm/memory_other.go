//go:build !linux

package wasm

import "errors"

// reserve is not implemented here: linear memory is a Go slice.
func reserve(uint64) ([]byte, error) { return nil, errors.ErrUnsupported }

func commit([]byte) error { return errors.ErrUnsupported }
func discard([]byte)      {}
func release([]byte)      {}
