package server

import (
	"testing"

	"github.com/braid-hpc/braid/store"
)

// TestBeatsPutBack: the beats of a failed write go back to the queue
// unless a newer beat of the same worker arrived meanwhile.
func TestBeatsPutBack(t *testing.T) {
	bs := newBeats()
	bs.add(store.Beat{Worker: "w1", Running: 1})
	bs.add(store.Beat{Worker: "w2", Running: 1})
	bs.add(store.Beat{Worker: "w2", Running: 2}) // replaces the first
	failed := bs.take()
	if len(failed) != 2 || failed["w2"].Running != 2 {
		t.Fatalf("took %v; want the newest beat of w1 and of w2", failed)
	}
	if again := bs.take(); again != nil {
		t.Fatalf("a second take got %v; want nothing", again)
	}
	bs.add(store.Beat{Worker: "w2", Running: 3})
	bs.putBack(failed)
	got := bs.take()
	if len(got) != 2 || got["w1"].Running != 1 || got["w2"].Running != 3 {
		t.Errorf("after a failed write: %v; want w1's old beat and w2's newer one", got)
	}
}
