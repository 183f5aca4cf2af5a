"""core/tcpstate.c: a socket's TCP state from /proc/self/net/tcp and tcp6, by its inode
(what the plugin watches to stop a build whose job's srun has gone, issue 39)."""

from __future__ import annotations

from squall._core import lib

TCP = (
    "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  "
    "timeout inode\n"
    "   0: 00000000:07E8 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0"
    "        0 1366 1 00000000a0aeb723 100 0 0 10 0\n"
    "   1: 0C2FCB0A:A1B2 0A2FCB0A:8CA3 01 00000000:00000000 00:00000000 00000000     0"
    "        0 52311 1 0000000011112222 20 4 30 10 -1\n"
    "   2: 0C2FCB0A:A1B4 0A2FCB0A:8CA4 08 00000000:00000000 00:00000000 00000000     0"
    "        0 52312 1 0000000011113333 20 4 30 10 -1\n")
TCP6 = (
    "  sl  local_address                         remote_address                        st "
    "tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
    "   0: 0000000000000000FFFF00000C2FCB0A:A1B6 0000000000000000FFFF00000A2FCB0A:8CA5 01 "
    "00000000:00000000 00:00000000 00000000     0        0 77001 1 0000000044445555 20 4 "
    "29 10 -1\n")


def test_the_state_of_a_socket_by_its_inode():
    assert lib.sq_tcp_state(TCP.encode(), 52311) == lib.SQ_TCP_ESTABLISHED
    assert lib.sq_tcp_state(TCP.encode(), 52312) == lib.SQ_TCP_CLOSE_WAIT
    assert lib.sq_tcp_state(TCP.encode(), 1366) == 0x0A  # LISTEN
    assert lib.sq_tcp_state(TCP6.encode(), 77001) == lib.SQ_TCP_ESTABLISHED


def test_an_inode_no_line_has_and_odd_text_are_minus_one():
    assert lib.sq_tcp_state(TCP.encode(), 99) == -1
    assert lib.sq_tcp_state(b"", 1) == -1
    assert lib.sq_tcp_state(b"garbage\n\n   0: x y zz\n", 1) == -1
    assert lib.sq_tcp_state(TCP.encode(), 0) == -1  # the header's "inode" is not a number
