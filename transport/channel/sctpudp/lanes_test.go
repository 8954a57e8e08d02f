package sctpudp

import (
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"
)

// readExactly reads len(want) bytes from c and compares them.
func readExactly(t *testing.T, c net.Conn, want string) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	got := make([]byte, len(want))
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatalf("read %q: %v", want, err)
	}
	if string(got) != want {
		t.Fatalf("read %q, want %q", got, want)
	}
}

func TestLanes(t *testing.T) {
	checkLeaks(t)
	c, s, _ := pair(t, Kind{})
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()

	if _, err := c.OpenLane(0); !errors.Is(err, ErrStreamID) {
		t.Errorf("OpenLane(0): %v, want ErrStreamID", err)
	}
	l1, err := c.OpenLane(1)
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := c.OpenLane(1); again != l1 {
		t.Error("OpenLane(1) twice returned two conns")
	}
	if _, err := l1.(*Stream).OpenLane(2); err == nil {
		t.Error("OpenLane on a lane (not the channel) succeeded")
	}
	if _, err := l1.Write([]byte("one")); err != nil {
		t.Fatal(err)
	}
	id, a1, err := s.AcceptLane(ctx)
	if err != nil || id != 1 {
		t.Fatalf("AcceptLane: %d %v, want lane 1", id, err)
	}
	readExactly(t, a1, "one")
	// The accepted lane is the one OpenLane returns, in both directions.
	if o1, _ := s.OpenLane(1); o1 != a1 {
		t.Error("OpenLane after AcceptLane returned another conn")
	}
	if _, err := a1.Write([]byte("back")); err != nil {
		t.Fatal(err)
	}
	readExactly(t, l1, "back")

	// Both sides open lane 3 and send at once: each reads the other's
	// bytes from its own lane 3, and AcceptLane does not hand it out.
	c3, _ := c.OpenLane(3)
	s3, _ := s.OpenLane(3)
	if _, err := c3.Write([]byte("from client")); err != nil {
		t.Fatal(err)
	}
	if _, err := s3.Write([]byte("from server")); err != nil {
		t.Fatal(err)
	}
	readExactly(t, s3, "from client")
	readExactly(t, c3, "from server")
	// Lane 4, used only by the client, is accepted after lane 3 was
	// skipped.
	c4, _ := c.OpenLane(4)
	if _, err := c4.Write([]byte("four")); err != nil {
		t.Fatal(err)
	}
	id, a4, err := s.AcceptLane(ctx)
	if err != nil || id != 4 {
		t.Fatalf("AcceptLane: %d %v, want lane 4 (lane 3 was opened locally)", id, err)
	}
	readExactly(t, a4, "four")

	// Closing the channel ends the lanes and AcceptLane.
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := l1.Write([]byte("x")); err == nil {
		t.Error("Write on a lane after the channel closed succeeded")
	}
	if _, _, err := c.AcceptLane(ctx); err == nil {
		t.Error("AcceptLane after Close succeeded")
	}
	if _, err := c.OpenLane(5); !errors.Is(err, net.ErrClosed) {
		t.Errorf("OpenLane after Close: %v, want net.ErrClosed", err)
	}
}
