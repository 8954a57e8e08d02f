// Package testbed emulates multi-homed hosts on one Linux machine, so
// braid's multi-path transport can be tested over k real, shaped and
// breakable paths without k networks.
//
// Up makes one network namespace per host and a hub namespace holding one
// bridge per network; every host has one veth link to every bridge,
// shaped by tbf to the network's rate:
//
//	      ns bt<id>-a                ns bt<id>-hub                 ns bt<id>-b
//	┌────────────────────┐      ┌──────────────────────┐      ┌────────────────────┐
//	│ bt<id>n0 10.1.0.1 ─┼──────┼─ bt<id>br0 ──────────┼──────┼─ bt<id>n0 10.1.0.2 │
//	│   ⇅ bt<id>s0 (tbf) │      │                      │      │ bt<id>s0 (tbf) ⇅   │
//	│ bt<id>n1 10.2.0.1 ─┼─tbf──┼─tbf─ bt<id>br1 ─ tbf─┼──tbf─┼─ bt<id>n1 10.2.0.2 │
//	└────────────────────┘      └──────────────────────┘      └────────────────────┘
//	  network 0 half duplex (the default), network 1 FullDuplex
//	  network j: 10.<j+1>.0.0/24 by default, host i is .<i+1>
//
// Token buckets bound a rate, not a delay: a lone packet finds its bucket
// full and leaves at once, where a wire would hold it for its transmission
// time. Streams are shaped faithfully either way, but a serial exchange of
// small messages is faithful only if both of its directions pay the same
// bucket. So by default a network is half duplex: each host's link is
// shaped by one tbf for both directions, on an ifb device bt<id>s<j> in
// the host's namespace that the link's egress and ingress are redirected
// through (the hub shapes nothing). Every exchange then pays for both
// messages, as on a wire, and a ping-pong stays within the rate at every
// message size (TestPingPongWithinRate); traffic both ways at once shares
// the rate, and one TCP stream gets about 0.93 of it instead of 0.945
// (its acknowledgements share the bucket; BenchmarkShaping). A network
// with FullDuplex is shaped by a tbf on both ends of each link instead,
// the rate each way: right for bulk traffic both ways at once, but there
// the request and the reply of a ping-pong each pass buckets of their
// own, so a 1 KB ping-pong measures up to twice the rate in effective
// bandwidth (8 x size / (RTT / 2)), and no setting of the buckets' burst
// changes that (BenchmarkPingPong shows both). What neither can emulate
// is the transmission time itself: a message and its echo sent whole over
// two different networks each pay their own link only, so such a
// ping-pong can measure up to the two links' rates together, where wires
// of that rate would allow one (each message spends its time on its wire,
// one after the other). An unshaped network (rate 0) has no shaper at
// all.
//
// Nothing is created in the root namespace: veth pairs are made in the hub
// with their peer placed straight into the host namespace, and no namespace
// has a route beyond its own subnets, so the addresses exist and are
// reachable only inside the bed. Every name starts with "bt" and a random
// id, so beds of parallel tests and CI runs do not collide; Down removes
// the namespaces and with them everything else.
//
// Faults: LinkDown/LinkUp take a host's interface down (loud: carrier
// drops), Blackhole/Restore detach the hub end from its bridge (silent:
// both ends stay up, packets vanish), SetRate reshapes a network.
//
// Tests run code inside a host with Run (in-process sockets) or Exec (a
// command), and skip with Skip where beds cannot be made (not root, no
// namespaces). For faults without root, on loopback, see package relay.
package testbed
