//go:build !unix

package sctpudp

import "time"

// processCPU cannot read the process's CPU time here: the metric reads 0.
func processCPU() time.Duration { return 0 }
