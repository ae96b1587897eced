// Point-to-point send/recv across real processes (2 to 4 ranks): a ring with tags kept apart,
// zero-sized messages, fp32 and bf16, messages in flight across collectives, counters, a recv
// not held up by sends whose recvs come later, and a recv whose sender never sends.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <chrono>

#include "fsdpp/common/error.h"
#include "world_fixture.h"

using namespace fsdpp;

namespace {

// What rank `src` sends with `tag`: distinct per sender and tag, exact in bf16.
torch::Tensor message(int64_t n, int src, int tag, torch::Dtype dt) {
  return ((torch::arange(n, torch::kLong) + 7 * src + 31 * tag) % 101).to(dt);
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

// Every rank sends its right neighbour two messages (tags 1 then 2) and receives its left
// neighbour's in the opposite order (tag 2 first): tags keep them apart.
TEST(P2P, RingWithTagsReceivedInOppositeOrder) {
  auto& pg = *test::world().group();
  const int n = pg.size();
  ASSERT_GE(n, 2) << "run with 2 or more ranks";
  const int right = (pg.rank() + 1) % n;
  const int left = (pg.rank() + n - 1) % n;
  for (auto dt : {torch::kFloat, torch::kBFloat16}) {
    for (int64_t size : {0, 1, 1000}) {
      auto a = message(size, pg.rank(), 1, dt);
      auto b = message(size + 3, pg.rank(), 2, dt);
      auto got_b = torch::full({size + 3}, -1, torch::dtype(dt));
      auto got_a = torch::full({size}, -1, torch::dtype(dt));
      auto sa = pg.send_async(a, right, 1);
      auto sb = pg.send_async(b, right, 2);
      auto rb = pg.recv_async(got_b, left, 2);
      auto ra = pg.recv_async(got_a, left, 1);
      rb.wait();
      ra.wait();
      sa.wait();
      sb.wait();
      EXPECT_TRUE(torch::equal(got_a, message(size, left, 1, dt))) << dt << " size " << size;
      EXPECT_TRUE(torch::equal(got_b, message(size + 3, left, 2, dt))) << dt << " size " << size;
    }
  }
}

// Messages of one tag arrive in the order they were sent; the blocking forms; counters count
// the bytes sent (RECV counts calls only).
TEST(P2P, SameTagInOrderAndCounters) {
  auto& pg = *test::world().group();
  const int n = pg.size();
  ASSERT_GE(n, 2);
  const auto before = pg.counters();
  uint64_t sent = 0;
  if (pg.rank() == 0) {
    for (int i = 0; i < 3; ++i) {
      auto t = torch::full({10 + i}, static_cast<float>(i));
      pg.send(t, n - 1, 7);
      sent += t.nbytes();
    }
  } else if (pg.rank() == n - 1) {
    for (int i = 0; i < 3; ++i) {
      auto t = torch::empty({10 + i});
      pg.recv(t, 0, 7);
      EXPECT_TRUE(torch::equal(t, torch::full({10 + i}, static_cast<float>(i)))) << i;
    }
  }
  const auto d = pg.counters() - before;
  EXPECT_EQ(d.bytes_of(dist::Collective::SEND), sent);
  EXPECT_EQ(d.calls_of(dist::Collective::SEND), pg.rank() == 0 ? 3u : 0u);
  EXPECT_EQ(d.bytes_of(dist::Collective::RECV), 0u);
  EXPECT_EQ(d.calls_of(dist::Collective::RECV), pg.rank() == n - 1 ? 3u : 0u);
  EXPECT_EQ(d.total_bytes(), sent);
  pg.barrier();
}

// A message in flight while collectives run on the same group, among them the ring
// reduce-scatter that uses send/recv itself: neither takes the other's data, and the
// collectives are not held up by the pending recv.
TEST(P2P, InFlightAcrossCollectives) {
  auto& pg = *test::world().group();
  const int n = pg.size();
  ASSERT_GE(n, 2);
  const int right = (pg.rank() + 1) % n;
  const int left = (pg.rank() + n - 1) % n;
  auto got = torch::full({5}, -1.0f);
  auto recv = pg.recv_async(got, left, 0);  // posted before the collectives, matched after
  auto in = torch::arange(5 * n, torch::kFloat) + pg.rank();
  auto out = torch::empty({5});
  pg.reduce_scatter_tensor(out, in, dist::ReduceOp::SUM);
  auto expect = (torch::arange(5 * n, torch::kFloat) * n + n * (n - 1) / 2).narrow(0, 5 * pg.rank(), 5);
  EXPECT_TRUE(torch::equal(out, expect)) << out;
  auto t = torch::full({2}, 1.0f);
  pg.all_reduce(t, dist::ReduceOp::SUM);
  EXPECT_TRUE(torch::equal(t, torch::full({2}, static_cast<float>(n))));
  pg.send(message(5, pg.rank(), 0, torch::kFloat), right, 0);
  recv.wait();
  EXPECT_TRUE(torch::equal(got, message(5, left, 0, torch::kFloat)));
}

// Sends complete only when their recv is posted, and a pipeline schedule posts some recvs
// only after messages that come back the other way (ZBVZeroBubble's rank 0 sends three
// activations ahead, and rank 1 takes the third only after rank 0's reply to the first). Rank 0
// issues 8 sends whose recvs rank 1 posts last, then a recv; rank 1 sends that message, waits
// for an acknowledgement that rank 0 received it, and only then takes the 8. Before the fix a
// completed recv waited for a finisher thread blocked on one of the sends, and the whole
// exchange hung until the sends timed out (on a 3 s group here).
TEST(P2P, RecvIsNotHeldUpBySendsWhoseRecvsComeLater) {
  auto& w = test::world();
  ASSERT_GE(w.size(), 2);
  std::shared_ptr<dist::ProcessGroup> g;
  if (w.rank() < 2) {
    dist::ProcessGroup::Options o;
    o.backend = w.backend();
    o.timeout = std::chrono::milliseconds(3000);
    o.name = "p2p_send_ahead";
    o.global_ranks = {0, 1};
    o.master_addr = w.env().master_addr;
    o.gloo_hostname = w.gloo_address();
    g = dist::ProcessGroup::create(w.store(), w.rank(), 2, o);
  }
  constexpr int kAhead = 8, kReply = 20, kAck = 21;
  for (int round = 0; round < 20 && w.rank() < 2; ++round) {
    const auto t0 = std::chrono::steady_clock::now();
    if (w.rank() == 0) {
      std::vector<dist::Work> sends;
      for (int k = 0; k < kAhead; ++k) sends.push_back(g->send_async(message(64, 0, k, torch::kFloat), 1, k));
      auto reply = torch::empty({64});
      g->recv(reply, 1, kReply);
      EXPECT_TRUE(torch::equal(reply, message(64, 1, kReply, torch::kFloat)));
      g->send(torch::ones({1}), 1, kAck);
      for (auto& s : sends) s.wait();
    } else {
      g->send(message(64, 1, kReply, torch::kFloat), 0, kReply);
      auto ack = torch::empty({1});
      g->recv(ack, 0, kAck);
      for (int k = 0; k < kAhead; ++k) {
        auto got = torch::empty({64});
        g->recv(got, 0, k);
        EXPECT_TRUE(torch::equal(got, message(64, 0, k, torch::kFloat))) << k;
      }
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ASSERT_LT(s, 1.5) << "round " << round << " took " << s << " s";
  }
  w.group()->barrier();
}

// On a group whose ranks are the world's in reverse, peers are group ranks.
TEST(P2P, PeersAreGroupRanks) {
  auto& w = test::world();
  const int n = w.size();
  ASSERT_GE(n, 2);
  std::vector<int> reversed;
  for (int r = n - 1; r >= 0; --r) reversed.push_back(r);
  auto g = w.new_group(reversed, "p2p_reversed");
  ASSERT_TRUE(g);
  EXPECT_EQ(g->rank(), n - 1 - w.rank());
  const int to = (g->rank() + 1) % n;    // group ranks
  const int from = (g->rank() + n - 1) % n;
  auto got = torch::empty({4}, torch::kBFloat16);
  auto r = g->recv_async(got, from, 3);
  g->send(message(4, w.rank(), 3, torch::kBFloat16), to, 3);
  r.wait();
  EXPECT_TRUE(torch::equal(got, message(4, reversed[from], 3, torch::kBFloat16)));
  // A bad peer is refused before anything is issued.
  EXPECT_THROW(g->send(got, g->rank(), 0), fsdpp::Error);
  EXPECT_THROW(g->send(got, n, 0), fsdpp::Error);
  EXPECT_THROW(g->recv(got, from, -1), fsdpp::Error);
}

// Rank 0 waits on a message rank 1 never sends: a TimeoutError within the group's timeout (2 s
// here, on a group of its own) naming the peer, the tag and the size.
TEST(P2P, RecvWithoutSenderTimesOutNamingThePeer) {
  auto& w = test::world();
  ASSERT_GE(w.size(), 2);
  const auto timeout = std::chrono::milliseconds(2000);
  std::shared_ptr<dist::ProcessGroup> g;
  if (w.rank() < 2) {
    dist::ProcessGroup::Options o;
    o.backend = w.backend();
    o.timeout = timeout;
    o.name = "p2p_timeout";
    o.global_ranks = {0, 1};
    o.master_addr = w.env().master_addr;
    o.gloo_hostname = w.gloo_address();
    g = dist::ProcessGroup::create(w.store(), w.rank(), 2, o);
  }
  if (w.rank() == 0) {
    auto t = torch::empty({4});
    const auto t0 = std::chrono::steady_clock::now();
    std::string what;
    try {
      g->recv(t, 1, 5, {"stage1"});
    } catch (const TimeoutError& e) {
      what = e.what();
    }
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ASSERT_FALSE(what.empty()) << "expected a TimeoutError";
    EXPECT_PRED2(contains, what, std::string("recv #1 from rank 1 with tag 5, [4] Float (16 B)"));
    EXPECT_PRED2(contains, what, std::string("module 'stage1'"));
    EXPECT_GE(waited, 1.5);
    EXPECT_LT(waited, 10.0);
    // The group is out of step now: what follows fails at once instead of hanging.
    EXPECT_THROW(g->barrier(), CommError);
  }
  // Rank 1 keeps its end open until rank 0 has seen the timeout.
  w.group()->barrier();
}
