// Package transport is braid's data plane: sessions between two hosts
// over k network paths, carrying independent ordered message streams.
//
//	host A                                        host B
//	  Stream 1 ─┐                              ┌─ Stream 1
//	  Stream 3 ─┼─ Session ══ path 0 (net 1) ══ Session ─┼─ Stream 3
//	  Stream 5 ─┘          ══ path 1 (net 2) ══          └─ Stream 5
//	                       ══ path 2 (net 3) ══
//
// A message is cut into segments (Config.SegmentSize). A segment longer
// than Config.StripeThreshold is striped over every live path with the
// Enhanced MuniSocket technique (package stripe): fragments carry no
// sequence number; each channel's receiver places them by the Start frame
// that preceded them and the channel's FIFO order. Shorter segments travel
// whole on the path chosen by Config.Policy. Path writers take the next
// frame only when the kernel can take more (TCP_NOTSENT_LOWAT), so a small
// message on one stream overtakes a large one on another within about one
// fragment, and faster paths take more fragments.
//
// Each channel proves the cluster key in a Noise handshake
// (Noise_NNpsk0_25519_AESGCM_SHA256, handshake.go) before any data is
// read, and everything it carries afterwards, on every lane, travels in
// AES-256-GCM records under that channel's fresh keys (secure.go): bytes
// altered, replayed, reordered or cut on the way fail with ErrIntegrity,
// and the channel is dropped like a failed path. Config.InsecurePlaintext
// turns the records off, to measure what they cost. The receiver acknowledges data frames per channel; when a
// path fails (reset, interface down, or silent past Config.PathTimeout)
// the frames it had not had acknowledged are sent again on the others, and
// the dialing side reconnects the path in the background. Duplicates are
// dropped by (stream, segment, fragment), so nothing is lost, duplicated or
// reordered within a stream.
//
// Lanes: over a channel kind that carries several independent ordered
// streams in one connection (sctp-udp and sctp: the streams of an SCTP
// association), each path's channel is split into Config.Lanes lanes.
// Lane 0 carries control frames; each braid stream's data, with the Start
// and End frames that steer its striped segments, goes on one of the
// others. A packet lost from one stream's data then delays only the
// streams sharing its lane, not the whole path. Each lane is FIFO, which
// is all Enhanced striping needs; frames are counted, acknowledged and
// failed over per lane. TCP and MPTCP channels have one lane.
//
// Per-stream flow control: the receiver grants each stream
// Config.StreamWindow bytes of unread data; a slow reader stalls only its
// own stream.
package transport
