// Package stripe decides which fragment of a striped message each path
// sends next. It is pure bookkeeping: no sockets, no goroutines, no
// clocks. The transport runs one sender per path and each sender asks a
// [Segment] for its next fragment with [Segment.Claim].
//
// A segment is one message cut into n equal fragments, indices 0 to n-1.
// The scheme follows Enhanced MuniSocket (Mohamed, Al-Jaroodi, Jiang,
// Swanson, "High-performance message striping over reliable transport
// protocols", Springer, 2006), sections 3 to 5.
//
// # Basic mode
//
// All paths draw indices from one shared counter and every fragment
// travels with its index. Simple and balanced, but it costs a header per
// fragment and every claim touches the same counter.
//
// # Enhanced mode: two paths
//
// One path sends 0, 1, 2, ... and the other n-1, n-2, ...; they stop where
// they meet, so a faster path simply ends up with more fragments. Because
// each path is a reliable FIFO channel, the receiver needs no per-fragment
// index: a Start control message tells it where the path's counter begins
// and in which direction it moves, and it counts from there. An End
// message says the path sends no more of this segment.
//
//	 path A (Inc) ->                       <- path B (Dec)
//	[ 0 | 1 | 2 | 3 | 4 | 5 | 6 | 7 | 8 | 9 | 10 | 11 ]
//	  A   A   A   A   A   A   A   A   B   B   B    B      they met at 7|8
//
// # Enhanced mode: k paths
//
// Paths are paired (sorted by rate, neighbours together) and the segment is
// cut into one contiguous partition per pair, sized by the pair's summed
// rate; an odd path out gets a partition of its own that it sweeps
// upwards. Each pair works its partition as above. A pair that exhausts
// its partition becomes free and helps:
//
//  1. it picks the partition with the most unsent fragments;
//  2. the busy thread that has sent fewer fragments teams up with the free
//     thread that has sent more, and the other two team up likewise;
//  3. the unsent range is cut in proportion to the fragments each new team
//     has sent so far (eq. 2-9 of the paper).
//
// The busy threads keep their position and direction; the helpers start
// from the cut, each with a Start:
//
//	before:   t_il ->  . . . . . . . . . . . . . .  <- t_dr     free: f1, f2
//	              P(t_il)                       P(t_dr)
//	after:    t_il ->  . . . . . . <- t_dl | t_ir -> . . . . . . . <- t_dr
//	              P(t_il)       P(t_dl)     P(t_ir)             P(t_dr)
//
// Free workers that cannot form a pair (an odd path, or a path whose
// partner died) join a partition that lacks a thread in one direction
// from its far end, or else split the busiest partition alone, working the
// left part downwards while the busy Dec thread keeps the right part to
// itself. A partition with one unsent fragment is left to its workers.
//
// A worker's contribution C(t) is the number of fragments it has claimed
// in the segment; when all contributions involved are zero the split
// falls back to the paths' rates, and to equal parts when those are
// unknown too.
//
// Start is issued only when the receiver's counter for a path cannot
// predict the next fragment, so a helper that continues exactly where its
// counter already points sends none. The paper estimates k + k/2(log4 n - 1)
// Starts per segment on loaded networks, 12 for 4 paths and 1024
// fragments; in simulation (TestControlMessages) this package averages 4
// on idle paths and about 9 on randomly loaded ones, where Basic mode
// sends 1024 headers.
//
// # Failures
//
// [Segment.Remove] drops a dead path. What it had not claimed stays in
// its partition: its partner keeps sweeping and the next free worker
// joins in the missing direction. What it had claimed but not delivered
// is the transport's to retransmit, with explicit indices. A path that
// comes back is re-admitted with [Segment.Join]; an id never seen before
// joins implicitly at its first Claim.
//
// After a Remove a worker that was told it had nothing left may find work
// again, so a receiver must accept a Start on a path after that path's
// End for the same segment.
package stripe
