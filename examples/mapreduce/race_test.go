//go:build race

package mapreduce

// raceEnabled: the race detector slows the cluster's every unit (a Go
// module's start costs some 60 ms of compute, instrumented Go around it
// much more) past a reasonable test; .ci/run runs the cluster test
// without it.
const raceEnabled = true
