package perf

import (
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/braid-hpc/braid/transport"
)

// TCPFigures are what the kernel measured of a bulk sender's TCP
// channels over a test (TCP_INFO), as iperf3 reports them for each of its
// streams' sockets: the largest congestion window, the smoothed round
// trip's largest, smallest and mean (in microseconds, as iperf3), and the
// segments retransmitted.
//
// A braid stream has no socket of its own: the messages of every stream
// are striped over the session's channels, one a path. The figures are
// therefore those of the channels, not of a stream: every stream of a
// test reports the figures of all the channels it used (all of them), and
// Retransmits counts each channel once, so a sum over the streams would
// count the channels' retransmits once per stream. The report's sums
// (end.sum_sent.retransmits) use these figures once; Channels has each
// channel's.
type TCPFigures struct {
	MaxSendCwnd int64 `json:"max_snd_cwnd"` // bytes
	MaxRTT      int64 `json:"max_rtt"`      // µs
	MinRTT      int64 `json:"min_rtt"`      // µs
	MeanRTT     int64 `json:"mean_rtt"`     // µs
	Retransmits int64 `json:"retransmits"`  // segments, each channel counted once
	// Channels has the same figures for each TCP channel, by path id.
	Channels []ChannelTCP `json:"channels,omitempty"`
}

// ChannelTCP is what the kernel measured of one TCP channel (one path)
// over a test; the fields are those of TCPFigures.
type ChannelTCP struct {
	Path        int   `json:"path"`
	MaxSendCwnd int64 `json:"max_snd_cwnd"`
	MaxRTT      int64 `json:"max_rtt"`
	MinRTT      int64 `json:"min_rtt"`
	MeanRTT     int64 `json:"mean_rtt"`
	Retransmits int64 `json:"retransmits"`
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

	// Written by run, read after done: the session's figures and each
	// channel's.
	all      rttCwnd
	channels map[int]*channelSamples
}

// rttCwnd accumulates round-trip samples and the largest window.
type rttCwnd struct {
	n              int
	maxCwnd        int64
	maxRTT, minRTT time.Duration
	sumRTT         time.Duration
}

func (a *rttCwnd) add(cwnd int64, rtt time.Duration) {
	a.maxCwnd = max(a.maxCwnd, cwnd)
	if rtt <= 0 {
		return
	}
	if a.n == 0 || rtt < a.minRTT {
		a.minRTT = rtt
	}
	a.maxRTT = max(a.maxRTT, rtt)
	a.sumRTT += rtt
	a.n++
}

func (a *rttCwnd) mean() time.Duration {
	if a.n == 0 {
		return 0
	}
	return a.sumRTT / time.Duration(a.n)
}

// channelSamples is one channel's samples: its retransmit counter at the
// first and the last sample, and its round trips and windows.
type channelSamples struct {
	firstRetr, lastRetr int64
	rttCwnd
}

func startTCPSampler(sess *transport.Session) *tcpSampler {
	s := &tcpSampler{sess: sess, stopCh: make(chan struct{}), done: make(chan struct{}),
		channels: map[int]*channelSamples{}}
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
		c := s.channels[id]
		if c == nil {
			c = &channelSamples{firstRetr: st.Retransmits}
			s.channels[id] = c
		}
		c.lastRetr = st.Retransmits
		c.add(st.SendCwnd, st.RTT)
		s.all.add(st.SendCwnd, st.RTT)
	}
}

// stop ends sampling and returns the figures, nil when no channel was
// TCP.
func (s *tcpSampler) stop() *TCPFigures {
	s.once.Do(func() { close(s.stopCh) })
	<-s.done
	if len(s.channels) == 0 {
		return nil
	}
	f := &TCPFigures{MaxSendCwnd: s.all.maxCwnd, MaxRTT: s.all.maxRTT.Microseconds(), MinRTT: s.all.minRTT.Microseconds(),
		MeanRTT: s.all.mean().Microseconds()}
	for _, id := range slices.Sorted(maps.Keys(s.channels)) {
		c := s.channels[id]
		retr := c.lastRetr - c.firstRetr
		f.Retransmits += retr
		f.Channels = append(f.Channels, ChannelTCP{Path: id, MaxSendCwnd: c.maxCwnd, MaxRTT: c.maxRTT.Microseconds(),
			MinRTT: c.minRTT.Microseconds(), MeanRTT: c.mean().Microseconds(), Retransmits: retr})
	}
	return f
}

// withTCP fills a stream's sender span with f's figures, those of the
// channels the stream's messages went over; nothing for nil.
func (s *IperfSpan) withTCP(f *TCPFigures) {
	if f == nil {
		return
	}
	cwnd, maxRTT, minRTT, meanRTT, retr := f.MaxSendCwnd, f.MaxRTT, f.MinRTT, f.MeanRTT, f.Retransmits
	s.MaxSendCwnd, s.MaxRTT, s.MinRTT, s.MeanRTT, s.Retransmits = &cwnd, &maxRTT, &minRTT, &meanRTT, &retr
}

// sumTCP sets a sum's retransmits to the channels' total, each channel
// counted once (not once per stream); nothing for nil (no TCP channels).
func (s *IperfSpan) sumTCP(f *TCPFigures) {
	if f == nil {
		return
	}
	r := f.Retransmits
	s.Retransmits = &r
}

// channel returns the figures of the channel of path id, nil for none.
func (f *TCPFigures) channel(id int) *ChannelTCP {
	if f == nil {
		return nil
	}
	for i := range f.Channels {
		if f.Channels[i].Path == id {
			return &f.Channels[i]
		}
	}
	return nil
}
