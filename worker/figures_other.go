//go:build !linux

package worker

// The figures below are Linux-only; elsewhere the worker reports zero,
// which the server reads as unknown.

func memTotal() int64       { return 0 }
func diskFree(string) int64 { return 0 }
func cpuMHz() int           { return 0 }
func loadAvg() float64      { return 0 }
