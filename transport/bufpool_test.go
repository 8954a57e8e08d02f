package transport

import "testing"

func TestBufPoolClasses(t *testing.T) {
	for _, tc := range []struct {
		n, cap int
	}{
		{0, 0}, {1, 1}, {minPooled - 1, minPooled - 1}, // too small to pool
		{minPooled, minPooled}, {minPooled + 1, 2 * minPooled},
		{19 << 10, 32 << 10}, {1 << 20, 1 << 20}, {1<<20 + 1, 2 << 20},
		{1 << maxPooledShift, 1 << maxPooledShift},
		{1<<maxPooledShift + 1, 1<<maxPooledShift + 1}, // too large to pool
	} {
		b := getBuf(tc.n)
		if len(b) != tc.n || cap(b) != tc.cap {
			t.Errorf("getBuf(%d): len %d cap %d, want len %d cap %d", tc.n, len(b), cap(b), tc.n, tc.cap)
		}
	}
}

func TestBufPoolReusesOnlyWholeClasses(t *testing.T) {
	// A buffer whose capacity is not a class is never handed out again,
	// whatever its length: a caller could otherwise receive memory shorter
	// than it asked for.
	odd := make([]byte, 40<<10)
	putBuf(odd)
	for range 100 {
		if b := getBuf(33 << 10); cap(b) != 64<<10 {
			t.Fatalf("getBuf(33 KiB) has capacity %d, want 64 KiB", cap(b))
		}
	}
	b := getBuf(5000)
	putBuf(b[:10]) // the length does not matter, the capacity does
	if c := getBuf(4097); cap(c) != 8<<10 {
		t.Fatalf("capacity %d, want 8 KiB", cap(c))
	}
}
