package server_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/braid-hpc/braid/api"
	"github.com/braid-hpc/braid/client"
)

// BenchmarkDatasetVsBlob runs, side by side on one server and two
// workers, the same bytes as a dataset of 1,000 files of 16 KB mapped
// with a cat-like operation (noop) and merged by concat, and as one blob
// of 16 MB split into 1,000 units of 16 KB: each iteration runs both
// jobs, in alternating order, and reports each one's time from submit to
// output and their ratio (dataset over blob). Both outputs are the
// input's bytes, checked once.
func BenchmarkDatasetVsBlob(b *testing.B) {
	const files, size = 1000, 16 << 10
	c := newCluster(b, nil)
	c.addWorker(1, nil)
	c.addWorker(1, nil)
	c.waitWorkers(2)
	rng := rand.New(rand.NewPCG(1, 2))
	all := make([]byte, files*size)
	for i := range all {
		all[i] = byte(rng.Uint32())
	}
	members := make([]api.DatasetMember, files)
	for i := range members {
		part := all[i*size : (i+1)*size]
		members[i] = api.DatasetMember{Name: fmt.Sprintf("part-%04d", i), Size: size, Blob: c.put(part)}
	}
	info, err := c.c.PutDataset(b.Context(), members)
	if err != nil {
		b.Fatal(err)
	}
	blob := c.put(all)
	jobs := []struct {
		name string
		req  api.JobRequest
		took time.Duration
	}{
		{"blob", api.JobRequest{Op: "noop", Input: blob, Split: fmt.Sprintf("bytes:%d", size), Merge: "concat"}, 0},
		{"dataset", api.JobRequest{Op: "noop", Input: info.ID, Merge: "concat"}, 0},
	}
	for _, j := range jobs {
		st := c.run(j.req)
		if st.State != api.JobDone || st.Output != blob || st.Units.Total != files {
			b.Fatalf("%s job: %s %q, %d units, output %s; want the input's bytes", j.name, st.State, st.Error, st.Units.Total, st.Output)
		}
	}
	b.SetBytes(2 * files * size)
	n := 0
	for b.Loop() {
		for k := range jobs {
			j := &jobs[(k+n)%len(jobs)]
			start := time.Now()
			if st := c.run(j.req); st.State != api.JobDone {
				b.Fatalf("%s job: %s %q", j.name, st.State, st.Error)
			}
			j.took += time.Since(start)
		}
		n++
	}
	b.ReportMetric(jobs[0].took.Seconds()/float64(n), "blob-s/job")
	b.ReportMetric(jobs[1].took.Seconds()/float64(n), "dataset-s/job")
	b.ReportMetric(jobs[1].took.Seconds()/jobs[0].took.Seconds(), "dataset/blob")
}

// BenchmarkDatasetDelete deletes a dataset of 10,000 members, each
// uploaded as a member (client.PutMember) of a few bytes, on SQLite and the local blob store:
// each iteration uploads the members and makes the dataset (not timed),
// then deletes the dataset (timed), which deletes every member, and
// checks that one is gone. It reports the time per member deleted too.
func BenchmarkDatasetDelete(b *testing.B) {
	const members = 10000
	c := newCluster(b, nil)
	ctx := b.Context()
	round := 0
	for b.Loop() {
		b.StopTimer()
		round++
		list := make([]api.DatasetMember, members)
		errs := make([]error, members)
		var wg sync.WaitGroup
		next := make(chan int)
		for range 8 {
			wg.Go(func() {
				for i := range next {
					data := fmt.Appendf(nil, "member %d of round %d\n", i, round)
					info, err := c.c.PutMember(ctx, bytes.NewReader(data))
					list[i], errs[i] = api.DatasetMember{Name: fmt.Sprintf("m%05d", i), Size: info.Size, Blob: info.ID}, err
				}
			})
		}
		for i := range members {
			next <- i
		}
		close(next)
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			b.Fatalf("upload the members: %v", err)
		}
		info, err := c.c.PutDataset(ctx, list)
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		if err := c.c.DeleteBlob(ctx, info.ID); err != nil {
			b.Fatalf("delete the dataset: %v", err)
		}
		b.StopTimer()
		if _, err := c.c.Get(ctx, list[members/2].Blob, io.Discard); !errors.Is(err, client.ErrNotFound) {
			b.Fatalf("a member after its dataset was deleted: %v, want not found", err)
		}
		b.StartTimer()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*members), "ns/member")
}
