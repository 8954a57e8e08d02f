package perf

import (
	"sync"
	"time"

	"github.com/braid-hpc/braid/transport"
)

// TCPFigures are what the kernel measured of a bulk sender's TCP
// channels over a test (TCP_INFO), as iperf3 reports them for each of its
// streams' sockets: the largest congestion window, the smoothed round
// trip's largest, smallest and mean (in microseconds, as iperf3), and the
// segments retransmitted. A braid stream has no socket of its own: its
// messages share the session's channels, one a path, so every stream of
// a test reports these figures of all its channels.
type TCPFigures struct {
	MaxSendCwnd int64 `json:"max_snd_cwnd"` // bytes
	MaxRTT      int64 `json:"max_rtt"`      // µs
	MinRTT      int64 `json:"min_rtt"`      // µs
	MeanRTT     int64 `json:"mean_rtt"`     // µs
	Retransmits int64 `json:"retransmits"`  // segments
}

// tcpSamplePeriod is how often a sender reads its channels' TCP_INFO.
const tcpSamplePeriod = 100 * time.Millisecond

// tcpSampler reads the TCP_INFO of a session's channels every
// tcpSamplePeriod until stopped.
type tcpSampler struct {
	sess   *transport.Session
	stopCh chan struct{}
	done   chan struct{}
	once   sync.Once

	// Written by run, read after done.
	n                  int
	maxCwnd            int64
	maxRTT, minRTT     time.Duration
	sumRTT             time.Duration
	firstRetr, lastRtr map[int]int64
}

func startTCPSampler(sess *transport.Session) *tcpSampler {
	s := &tcpSampler{sess: sess, stopCh: make(chan struct{}), done: make(chan struct{}),
		firstRetr: map[int]int64{}, lastRtr: map[int]int64{}}
	go s.run()
	return s
}

func (s *tcpSampler) run() {
	defer close(s.done)
	t := time.NewTicker(tcpSamplePeriod)
	defer t.Stop()
	s.sample()
	for {
		select {
		case <-s.stopCh:
			s.sample()
			return
		case <-t.C:
			s.sample()
		}
	}
}

func (s *tcpSampler) sample() {
	for id, st := range s.sess.TCPStats() {
		if _, ok := s.firstRetr[id]; !ok {
			s.firstRetr[id] = st.Retransmits
		}
		s.lastRtr[id] = st.Retransmits
		s.maxCwnd = max(s.maxCwnd, st.SendCwnd)
		if st.RTT <= 0 {
			continue
		}
		if s.n == 0 || st.RTT < s.minRTT {
			s.minRTT = st.RTT
		}
		s.maxRTT = max(s.maxRTT, st.RTT)
		s.sumRTT += st.RTT
		s.n++
	}
}

// stop ends sampling and returns the figures, nil when no channel was
// TCP.
func (s *tcpSampler) stop() *TCPFigures {
	s.once.Do(func() { close(s.stopCh) })
	<-s.done
	if len(s.firstRetr) == 0 {
		return nil
	}
	f := &TCPFigures{MaxSendCwnd: s.maxCwnd, MaxRTT: s.maxRTT.Microseconds(), MinRTT: s.minRTT.Microseconds()}
	if s.n > 0 {
		f.MeanRTT = (s.sumRTT / time.Duration(s.n)).Microseconds()
	}
	for id, last := range s.lastRtr {
		f.Retransmits += last - s.firstRetr[id]
	}
	return f
}

// withTCP fills a stream's sender span with f's figures; nothing for nil.
func (s *IperfSpan) withTCP(f *TCPFigures) {
	if f == nil {
		return
	}
	cwnd, maxRTT, minRTT, meanRTT, retr := f.MaxSendCwnd, f.MaxRTT, f.MinRTT, f.MeanRTT, f.Retransmits
	s.MaxSendCwnd, s.MaxRTT, s.MinRTT, s.MeanRTT, s.Retransmits = &cwnd, &maxRTT, &minRTT, &meanRTT, &retr
}
