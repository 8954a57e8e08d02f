package ops

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"sync"
)

// Execute runs a job in this process: Split, then Run every unit with up
// to parallel units at once (0 means GOMAXPROCS) as their dependencies
// finish, then Assemble. The first failing unit cancels the rest and its
// error, naming the unit, is returned.
func Execute(ctx context.Context, op Op, in io.ReaderAt, size int64, params map[string]string, hint Hint, parallel int) ([]byte, error) {
	specs, err := op.Split(in, size, params, hint)
	if err != nil {
		return nil, err
	}
	results, err := RunUnits(ctx, op, in, specs, parallel)
	if err != nil {
		return nil, err
	}
	return op.Assemble(params, hint, results)
}

// RunUnits runs the units specs in dependency order, up to parallel at
// once (0 means GOMAXPROCS), reading input ranges from in, and returns
// their results in order.
func RunUnits(ctx context.Context, op Op, in io.ReaderAt, specs []UnitSpec, parallel int) ([][]byte, error) {
	if parallel <= 0 {
		parallel = runtime.GOMAXPROCS(0)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	n := len(specs)
	results := make([][]byte, n)
	waiting := make([]int, n)    // unfinished deps per unit
	children := make([][]int, n) // units that depend on each unit
	var ready []int
	for i, s := range specs {
		for _, d := range s.Deps {
			if d < 0 || d >= i {
				return nil, fmt.Errorf("%s: unit %d depends on unit %d, which is not an earlier unit: %w", op.Name(), i, d, ErrBadInput)
			}
			children[d] = append(children[d], i)
		}
		waiting[i] = len(s.Deps)
		if waiting[i] == 0 {
			ready = append(ready, i)
		}
	}

	var (
		mu       sync.Mutex
		cond     = sync.NewCond(&mu)
		done     int
		firstErr error
		wg       sync.WaitGroup
	)
	runOne := func(i int) ([]byte, error) {
		s := specs[i]
		inputs := make([][]byte, 1, 1+len(s.Deps))
		inputs[0] = s.Data
		if s.FromInput {
			buf := make([]byte, s.Len)
			if n, err := in.ReadAt(buf, s.Off); n < len(buf) {
				return nil, fmt.Errorf("read input bytes %d-%d: %w", s.Off, s.Off+s.Len, err)
			}
			inputs[0] = buf
		}
		mu.Lock()
		for _, d := range s.Deps {
			inputs = append(inputs, results[d])
		}
		mu.Unlock()
		if s.Reduce {
			if r, ok := op.(interface{ Reducer() Op }); ok && r.Reducer() != nil {
				return r.Reducer().Run(ctx, s.Params, [][]byte{Concat(inputs)})
			}
		}
		return op.Run(ctx, s.Params, inputs)
	}
	for range min(parallel, max(n, 1)) {
		wg.Go(func() {
			mu.Lock()
			defer mu.Unlock()
			for {
				for len(ready) == 0 && firstErr == nil && done < n {
					cond.Wait()
				}
				if firstErr != nil || done == n {
					return
				}
				i := ready[0]
				ready = ready[1:]
				mu.Unlock()
				out, err := runOne(i)
				mu.Lock()
				if err != nil {
					if firstErr == nil {
						firstErr = fmt.Errorf("%s: unit %d: %w", op.Name(), i, err)
						cancel()
					}
					cond.Broadcast()
					return
				}
				results[i] = out
				done++
				for _, c := range children[i] {
					if waiting[c]--; waiting[c] == 0 {
						ready = append(ready, c)
					}
				}
				cond.Broadcast()
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		return nil, firstErr
	}
	return results, nil
}
