package sctpudp

import (
	"errors"
	"net"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/pion/transport/v5/udp"

	"github.com/braid-hpc/braid/internal/testwait"
)

// failingUDP stands in for pion's UDP listener: its Accept fails n times,
// then waits for Close.
type failingUDP struct {
	mu    sync.Mutex
	n     int
	calls int
	done  chan struct{}
	once  sync.Once
}

func (f *failingUDP) Accept() (net.Conn, error) {
	f.mu.Lock()
	f.calls++
	if f.n > 0 {
		f.n--
		f.mu.Unlock()
		return nil, os.NewSyscallError("recvmmsg", syscall.ENOBUFS)
	}
	f.mu.Unlock()
	<-f.done
	return nil, udp.ErrClosedListener
}

func (f *failingUDP) Close() error {
	f.once.Do(func() { close(f.done) })
	return nil
}

func (f *failingUDP) Addr() net.Addr { return &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1} }

// TestServeSurvivesAcceptErrors: the listener's loop retries failed
// accepts and ends only at Close, when Accept reports it closed.
func TestServeSurvivesAcceptErrors(t *testing.T) {
	cfg, err := Config{}.populate()
	if err != nil {
		t.Fatal(err)
	}
	ul := &failingUDP{n: 4, done: make(chan struct{})}
	l := &listener{ul: ul, cfg: &cfg, ready: make(chan *Stream, 1), done: make(chan struct{}),
		served: make(chan struct{}), slots: make(chan struct{}, 1), pending: map[net.Conn]struct{}{}}
	l.wg.Add(1)
	go l.serve()
	calls := func() int {
		ul.mu.Lock()
		defer ul.mu.Unlock()
		return ul.calls
	}
	if !testwait.Until(5*time.Second, func() bool { return calls() == 5 }) {
		t.Fatalf("%d accepts after 4 failures, want 5", calls())
	}
	select {
	case <-l.served:
		t.Fatalf("serve ended on an error that passes: %v", l.serveErr)
	default:
	}
	errc := make(chan error, 1)
	go func() {
		_, err := l.Accept()
		errc <- err
	}()
	l.Close()
	if err := <-errc; !errors.Is(err, net.ErrClosed) {
		t.Errorf("Accept after Close = %v, want net.ErrClosed", err)
	}
}
