/*
 * usrsctp_peer: an independent SCTP-over-UDP (RFC 6951) peer for the
 * sctp-udp interop test, built on libusrsctp.
 *
 *   usrsctp_peer server UDP_PORT SCTP_PORT
 *       Listens on SCTP port SCTP_PORT, tunnelled over UDP port UDP_PORT;
 *       prints "READY" once listening, accepts one association and echoes
 *       every message back on the stream it came in on, until the peer shuts
 *       the association down. Then prints "OK ..." and exits 0.
 *
 *   usrsctp_peer client UDP_PORT REMOTE_IP REMOTE_UDP_PORT SCTP_PORT STREAMS ROUNDS
 *       Sends from UDP port UDP_PORT to REMOTE_IP:REMOTE_UDP_PORT, connects
 *       to SCTP port SCTP_PORT, and for ROUNDS rounds sends one message on
 *       each of STREAMS stream ids (0..STREAMS-1) and waits for their echo,
 *       checking every byte and the stream it came back on. Then shuts down,
 *       prints "OK ..." and exits 0.
 *
 * $USRSCTP_PEER_MTU, if set and not 0, pins the path MTU (PMTU discovery
 * off); otherwise usrsctp picks its own (1460 over UDP here). pion, on the
 * other side, receives SCTP packets of at most 8192 bytes.
 *
 * Every failure prints "FAIL ..." on stderr and exits non-zero; the whole
 * run is bounded by alarm(60).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <unistd.h>

#include <usrsctp.h>

#define MAX_STREAMS 16
#define MAX_MSG 20000
#define BUF_SIZE (256 * 1024)

static void fail(const char *fmt, ...) {
	va_list ap;
	fprintf(stderr, "FAIL ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, " (errno %d: %s)\n", errno, strerror(errno));
	exit(1);
}

/* The byte at offset off of stream sid, on the client's streams. */
static uint8_t gen(unsigned sid, uint64_t off) {
	return (uint8_t)(sid * 31u + off + (off >> 9) * 7u);
}

/* The length of the message the client sends in round r on stream sid. */
static size_t msg_len(unsigned r, unsigned sid) {
	return 1 + ((size_t)r * 7919u + (size_t)sid * 104729u) % MAX_MSG;
}

static void set_path_mtu(struct socket *s) {
	const char *env = getenv("USRSCTP_PEER_MTU");
	uint32_t mtu = env ? (uint32_t)atoi(env) : 0;
	struct sctp_paddrparams pp;

	if (mtu == 0) {
		return;
	}
	memset(&pp, 0, sizeof(pp));
	pp.spp_assoc_id = SCTP_FUTURE_ASSOC;
	pp.spp_flags = SPP_PMTUD_DISABLE;
	pp.spp_pathmtu = mtu;
	if (usrsctp_setsockopt(s, IPPROTO_SCTP, SCTP_PEER_ADDR_PARAMS, &pp, sizeof(pp)) < 0) {
		fail("setsockopt SCTP_PEER_ADDR_PARAMS");
	}
}

static struct socket *new_socket(void) {
	struct socket *s;
	struct sctp_initmsg init;
	const int on = 1;

	s = usrsctp_socket(AF_INET, SOCK_STREAM, IPPROTO_SCTP, NULL, NULL, 0, NULL);
	if (s == NULL) {
		fail("usrsctp_socket");
	}
	memset(&init, 0, sizeof(init));
	init.sinit_num_ostreams = MAX_STREAMS;
	init.sinit_max_instreams = MAX_STREAMS;
	if (usrsctp_setsockopt(s, IPPROTO_SCTP, SCTP_INITMSG, &init, sizeof(init)) < 0) {
		fail("setsockopt SCTP_INITMSG");
	}
	if (usrsctp_setsockopt(s, IPPROTO_SCTP, SCTP_RECVRCVINFO, &on, sizeof(on)) < 0) {
		fail("setsockopt SCTP_RECVRCVINFO");
	}
	if (usrsctp_setsockopt(s, IPPROTO_SCTP, SCTP_NODELAY, &on, sizeof(on)) < 0) {
		fail("setsockopt SCTP_NODELAY");
	}
	set_path_mtu(s);
	return s;
}

static void bind_port(struct socket *s, uint16_t port) {
	struct sockaddr_in a;

	memset(&a, 0, sizeof(a));
	a.sin_family = AF_INET;
	a.sin_port = htons(port);
	a.sin_addr.s_addr = htonl(INADDR_ANY);
	if (usrsctp_bind(s, (struct sockaddr *)&a, sizeof(a)) < 0) {
		fail("usrsctp_bind port %u", port);
	}
}

static void send_on(struct socket *s, unsigned sid, const void *data, size_t len) {
	struct sctp_sndinfo snd;

	memset(&snd, 0, sizeof(snd));
	snd.snd_sid = (uint16_t)sid;
	if (usrsctp_sendv(s, data, len, NULL, 0, &snd, sizeof(snd), SCTP_SENDV_SNDINFO, 0) < 0) {
		fail("usrsctp_sendv %zu bytes on stream %u", len, sid);
	}
}

/* recv_on reads one message (or part of one) and its stream id. */
static ssize_t recv_on(struct socket *s, void *buf, size_t len, unsigned *sid) {
	struct sctp_rcvinfo rcv;
	struct sockaddr_storage from;
	socklen_t fromlen = sizeof(from), infolen = sizeof(rcv);
	unsigned int infotype = 0;
	int flags = 0;
	ssize_t n;

	memset(&rcv, 0, sizeof(rcv));
	n = usrsctp_recvv(s, buf, len, (struct sockaddr *)&from, &fromlen, &rcv, &infolen, &infotype, &flags);
	if (n > 0 && (flags & MSG_NOTIFICATION)) {
		return recv_on(s, buf, len, sid);
	}
	if (n > 0 && infotype != SCTP_RECVV_RCVINFO) {
		fail("message without SCTP_RECVV_RCVINFO");
	}
	*sid = rcv.rcv_sid;
	return n;
}

static void report_mtu(struct socket *s) {
	struct sctp_paddrinfo pi;
	struct sockaddr *peers = NULL;
	socklen_t len = sizeof(pi);
	int n = usrsctp_getpaddrs(s, 0, &peers);

	if (n <= 0) {
		return;
	}
	memset(&pi, 0, sizeof(pi));
	memcpy(&pi.spinfo_address, peers, sizeof(struct sockaddr_in));
	if (usrsctp_getsockopt(s, IPPROTO_SCTP, SCTP_GET_PEER_ADDR_INFO, &pi, &len) == 0) {
		fprintf(stderr, "usrsctp_peer: path MTU %u\n", pi.spinfo_mtu);
	}
	usrsctp_freepaddrs(peers);
}

static void finish(void) {
	int i;

	for (i = 0; i < 100 && usrsctp_finish() != 0; i++) {
		usleep(50 * 1000);
	}
}

static int serve(uint16_t sctp_port) {
	struct socket *ls, *s;
	static uint8_t buf[BUF_SIZE];
	unsigned long long msgs = 0, bytes = 0, per[MAX_STREAMS] = {0};
	unsigned sid, i;
	ssize_t n;

	ls = new_socket();
	bind_port(ls, sctp_port);
	if (usrsctp_listen(ls, 1) < 0) {
		fail("usrsctp_listen");
	}
	printf("READY\n");
	fflush(stdout);
	s = usrsctp_accept(ls, NULL, NULL);
	if (s == NULL) {
		fail("usrsctp_accept");
	}
	report_mtu(s);
	for (;;) {
		n = recv_on(s, buf, sizeof(buf), &sid);
		if (n == 0) {
			break; /* the peer shut down */
		}
		if (n < 0) {
			fail("usrsctp_recvv after %llu messages", msgs);
		}
		if (sid >= MAX_STREAMS) {
			fail("message on stream %u, at most %d expected", sid, MAX_STREAMS - 1);
		}
		send_on(s, sid, buf, (size_t)n);
		msgs++;
		bytes += (unsigned long long)n;
		per[sid] += (unsigned long long)n;
	}
	usrsctp_close(s);
	usrsctp_close(ls);
	printf("OK echoed messages=%llu bytes=%llu", msgs, bytes);
	for (i = 0; i < MAX_STREAMS; i++) {
		if (per[i]) {
			printf(" stream%u=%llu", i, per[i]);
		}
	}
	printf("\n");
	return 0;
}

static int client(uint16_t remote_udp, const char *remote_ip, uint16_t sctp_port, unsigned streams, unsigned rounds) {
	struct socket *s;
	struct sockaddr_in to;
	struct sctp_udpencaps enc;
	static uint8_t msg[MAX_MSG], buf[BUF_SIZE];
	uint64_t sent[MAX_STREAMS] = {0}, got[MAX_STREAMS] = {0};
	unsigned long long total = 0;
	unsigned r, sid;
	size_t k, len;
	ssize_t n;

	if (streams < 1 || streams > MAX_STREAMS) {
		fail("streams %u out of [1, %d]", streams, MAX_STREAMS);
	}
	s = new_socket();
	bind_port(s, sctp_port);

	memset(&enc, 0, sizeof(enc));
	enc.sue_address.ss_family = AF_INET;
	enc.sue_port = htons(remote_udp);
	if (usrsctp_setsockopt(s, IPPROTO_SCTP, SCTP_REMOTE_UDP_ENCAPS_PORT, &enc, sizeof(enc)) < 0) {
		fail("setsockopt SCTP_REMOTE_UDP_ENCAPS_PORT");
	}
	memset(&to, 0, sizeof(to));
	to.sin_family = AF_INET;
	to.sin_port = htons(sctp_port);
	if (inet_pton(AF_INET, remote_ip, &to.sin_addr) != 1) {
		fail("bad address %s", remote_ip);
	}
	if (usrsctp_connect(s, (struct sockaddr *)&to, sizeof(to)) < 0) {
		fail("usrsctp_connect %s:%u", remote_ip, sctp_port);
	}
	report_mtu(s);

	for (r = 0; r < rounds; r++) {
		for (sid = 0; sid < streams; sid++) {
			len = msg_len(r, sid);
			for (k = 0; k < len; k++) {
				msg[k] = gen(sid, sent[sid] + k);
			}
			send_on(s, sid, msg, len);
			sent[sid] += len;
		}
		for (;;) {
			for (sid = 0; sid < streams && got[sid] == sent[sid]; sid++) {
			}
			if (sid == streams) {
				break; /* every echo of this round is back */
			}
			n = recv_on(s, buf, sizeof(buf), &sid);
			if (n <= 0) {
				fail("usrsctp_recvv in round %u returned %zd", r, n);
			}
			if (sid >= streams) {
				fail("echo on stream %u, only 0..%u used", sid, streams - 1);
			}
			if (got[sid] + (uint64_t)n > sent[sid]) {
				fail("stream %u: echo runs to %llu, only %llu sent", sid,
				     (unsigned long long)(got[sid] + n), (unsigned long long)sent[sid]);
			}
			for (k = 0; k < (size_t)n; k++) {
				if (buf[k] != gen(sid, got[sid] + k)) {
					fail("stream %u: byte %llu is %u, want %u", sid,
					     (unsigned long long)(got[sid] + k), buf[k], gen(sid, got[sid] + k));
				}
			}
			got[sid] += (uint64_t)n;
			total += (unsigned long long)n;
		}
	}
	usrsctp_close(s); /* graceful SHUTDOWN */
	printf("OK verified streams=%u rounds=%u bytes=%llu\n", streams, rounds, total);
	return 0;
}

int main(int argc, char **argv) {
	int rc;

	alarm(60);
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc == 4 && strcmp(argv[1], "server") == 0) {
		usrsctp_init((uint16_t)atoi(argv[2]), NULL, NULL);
		usrsctp_sysctl_set_sctp_blackhole(2);
		rc = serve((uint16_t)atoi(argv[3]));
	} else if (argc == 8 && strcmp(argv[1], "client") == 0) {
		usrsctp_init((uint16_t)atoi(argv[2]), NULL, NULL);
		usrsctp_sysctl_set_sctp_blackhole(2);
		rc = client((uint16_t)atoi(argv[4]), argv[3], (uint16_t)atoi(argv[5]),
		            (unsigned)atoi(argv[6]), (unsigned)atoi(argv[7]));
	} else {
		fprintf(stderr,
		        "usage: %s server UDP_PORT SCTP_PORT\n"
		        "       %s client UDP_PORT REMOTE_IP REMOTE_UDP_PORT SCTP_PORT STREAMS ROUNDS\n",
		        argv[0], argv[0]);
		return 2;
	}
	finish();
	return rc;
}
