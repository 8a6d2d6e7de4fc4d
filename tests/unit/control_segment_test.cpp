// The control segment reader's graded open (shm/control_segment.hpp): every grade and every
// refusal, on real memfd segments made by the real writer (corrupted through its writable
// mapping where a test needs a bad field), and real processes for the daemon that wrote it.
#include "kvpool/shm/control_segment.hpp"

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <string>
#include <vector>

extern char** environ;

namespace kvpool::shm {
namespace {

// A control segment with no pools, written by this process (its daemon_pid is ours).
ControlWriter make_writer() {
  auto layout = control_layout(4, {}, 0);
  EXPECT_TRUE(layout) << layout.status().message();
  auto w = ControlWriter::create("graded-test", 4, *layout, {}, 0);
  EXPECT_TRUE(w) << w.status().message();
  return std::move(w.value());
}

// A second, read-only mapping of the writer's segment, as a client or a successor gets one.
Segment readonly(const ControlWriter& w) {
  auto fd = w.open_readonly_fd();
  EXPECT_TRUE(fd) << fd.status().message();
  auto s = Segment::map_fd(std::move(fd.value()), /*writable=*/false);
  EXPECT_TRUE(s) << s.status().message();
  return std::move(s.value());
}

GradedControl open_as(const ControlWriter& w, ControlOpener who) {
  return ControlReader::open_graded(readonly(w), who);
}

// A child process of another program (/bin/cat, blocked on a pipe): posix_spawn returns
// once it has exec'ed, so its /proc/<pid>/exe is cat's from then on.
struct OtherProgram {
  pid_t pid = -1;
  int stdin_w = -1;
  OtherProgram() {
    int p[2];
    EXPECT_EQ(::pipe(p), 0);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, p[0], 0);
    posix_spawn_file_actions_addclose(&fa, p[1]);
    char arg0[] = "cat";
    char* argv[] = {arg0, nullptr};
    EXPECT_EQ(::posix_spawn(&pid, "/bin/cat", &fa, nullptr, argv, environ), 0);
    posix_spawn_file_actions_destroy(&fa);
    ::close(p[0]);
    stdin_w = p[1];
  }
  ~OtherProgram() {
    ::close(stdin_w);  // cat reads EOF and exits
    int st = 0;
    ::waitpid(pid, &st, 0);
  }
};

// A child of this very program (fork, no exec) that runs until told to exit: what a live
// kvpoold looks like to its would-be successor (the same executable).
struct SameProgram {
  pid_t pid = -1;
  int release_w = -1;
  SameProgram() {
    int p[2];
    EXPECT_EQ(::pipe(p), 0);
    pid = ::fork();
    if (pid == 0) {
      ::close(p[1]);
      char c;
      while (::read(p[0], &c, 1) < 0) {
      }
      ::_exit(0);
    }
    ::close(p[0]);
    release_w = p[1];
  }
  // Lets it exit and reaps it: its pid then names nothing.
  void end() {
    if (pid <= 0) return;
    ::close(release_w);
    int st = 0;
    ::waitpid(pid, &st, 0);
    pid = -1;
  }
  ~SameProgram() { end(); }
};

TEST(ControlGradedOpen, AClientSeesItStartingUntilTheDaemonPublishesReady) {
  ControlWriter w = make_writer();
  GradedControl g = open_as(w, ControlOpener::kClient);
  EXPECT_EQ(g.grade, ControlGrade::kStarting);
  EXPECT_FALSE(g.reader.valid());
  ASSERT_NE(g.header, nullptr);
  auto r = ControlReader::open(readonly(w));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.status().code(), ErrorCode::kDaemonGone);

  w.publish_ready();
  g = open_as(w, ControlOpener::kClient);
  EXPECT_EQ(g.grade, ControlGrade::kReady) << g.why.message();
  ASSERT_TRUE(g.reader.valid());
  EXPECT_EQ(g.reader.max_clients(), 4u);
  EXPECT_TRUE(ControlReader::open(readonly(w)));
}

TEST(ControlGradedOpen, AClientSeesAStoppingDaemonAsGone) {
  ControlWriter w = make_writer();
  w.publish_ready();
  w.publish_stopping();
  GradedControl g = open_as(w, ControlOpener::kClient);
  EXPECT_EQ(g.grade, ControlGrade::kStopping);
  EXPECT_FALSE(g.reader.valid());
  auto r = ControlReader::open(readonly(w));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.status().code(), ErrorCode::kDaemonGone);
}

TEST(ControlGradedOpen, RefusesASegmentTooShortForAHeader) {
  auto s = Segment::create_anonymous("graded-short", sizeof(ControlHeader) - 64);
  ASSERT_TRUE(s) << s.status().message();
  for (ControlOpener who : {ControlOpener::kClient, ControlOpener::kSuccessor}) {
    auto fd = s->open_readonly_fd();
    ASSERT_TRUE(fd);
    auto m = Segment::map_fd(std::move(fd.value()), false);
    ASSERT_TRUE(m);
    GradedControl g = ControlReader::open_graded(std::move(m.value()), who);
    EXPECT_EQ(g.grade, ControlGrade::kRefused);
    EXPECT_EQ(g.why.code(), ErrorCode::kProtocolError);
    EXPECT_EQ(g.header, nullptr);
  }
}

TEST(ControlGradedOpen, RefusesABadMagic) {
  ControlWriter w = make_writer();
  w.publish_ready();
  w.header().magic ^= 1;
  for (ControlOpener who : {ControlOpener::kClient, ControlOpener::kSuccessor}) {
    GradedControl g = open_as(w, who);
    EXPECT_EQ(g.grade, ControlGrade::kRefused);
    EXPECT_EQ(g.why.code(), ErrorCode::kProtocolError);
    EXPECT_NE(g.why.message().find("not a kvpool segment"), std::string::npos);
    EXPECT_EQ(g.header, nullptr);
  }
}

TEST(ControlGradedOpen, RefusesAnotherLayoutMajorButNamesItsHeader) {
  ControlWriter w = make_writer();
  w.publish_ready();
  w.header().layout_major = static_cast<uint16_t>(kLayoutMajor + 1);
  for (ControlOpener who : {ControlOpener::kClient, ControlOpener::kSuccessor}) {
    GradedControl g = open_as(w, who);
    EXPECT_EQ(g.grade, ControlGrade::kRefused);
    EXPECT_EQ(g.why.code(), ErrorCode::kVersionMismatch);
    EXPECT_NE(g.header, nullptr);  // a successor still learns which daemon it came from
    EXPECT_FALSE(g.reader.valid());
  }
}

TEST(ControlGradedOpen, ASuccessorRefusesAnotherMinorOrHeaderSizeAClientDoesNot) {
  for (int field = 0; field < 2; ++field) {
    ControlWriter w = make_writer();
    w.publish_ready();
    if (field == 0)
      w.header().layout_minor = static_cast<uint16_t>(kLayoutMinor + 1);
    else
      w.header().header_bytes = uint32_t{sizeof(ControlHeader) + 64};
    GradedControl c = open_as(w, ControlOpener::kClient);
    EXPECT_EQ(c.grade, ControlGrade::kReady) << field << ": " << c.why.message();
    GradedControl s = open_as(w, ControlOpener::kSuccessor);
    EXPECT_EQ(s.grade, ControlGrade::kRefused) << field;
    EXPECT_EQ(s.why.code(), ErrorCode::kVersionMismatch) << field;
    EXPECT_NE(s.why.message().find("previous kvpoold used shm layout"), std::string::npos);
  }
}

TEST(ControlGradedOpen, RefusesATotalSizeBeyondTheSegment) {
  ControlWriter w = make_writer();
  w.publish_ready();
  w.header().total_bytes = readonly(w).size() + 4096;
  for (ControlOpener who : {ControlOpener::kClient, ControlOpener::kSuccessor}) {
    GradedControl g = open_as(w, who);
    EXPECT_EQ(g.grade, ControlGrade::kRefused);
    EXPECT_EQ(g.why.code(), ErrorCode::kProtocolError);
    EXPECT_NE(g.why.message().find("smaller than its header says"), std::string::npos);
  }
}

TEST(ControlGradedOpen, RefusesAPoolTableOutsideOrMisaligned) {
  for (int how = 0; how < 3; ++how) {
    ControlWriter w = make_writer();
    w.publish_ready();
    if (how == 0) w.header().num_pools = 1u << 30;
    if (how == 1) w.header().pools_offset = ~uint64_t{0} - 8;
    if (how == 2) {
      w.header().num_pools = 1;
      w.header().pools_offset += 1;
    }
    for (ControlOpener who : {ControlOpener::kClient, ControlOpener::kSuccessor}) {
      GradedControl g = open_as(w, who);
      EXPECT_EQ(g.grade, ControlGrade::kRefused) << how;
      EXPECT_EQ(g.why.code(), ErrorCode::kProtocolError) << how;
      EXPECT_NE(g.why.message().find("the pool table lies outside"), std::string::npos) << how;
    }
  }
}

TEST(ControlGradedOpen, ASuccessorRefusesTheSegmentOfADaemonThatStillRuns) {
  ControlWriter w = make_writer();
  w.publish_ready();
  SameProgram daemon;
  ASSERT_GT(daemon.pid, 0);
  w.header().daemon_pid = daemon.pid;
  GradedControl g = open_as(w, ControlOpener::kSuccessor);
  EXPECT_EQ(g.grade, ControlGrade::kRefused);
  EXPECT_EQ(g.why.code(), ErrorCode::kInvalidState);
  EXPECT_NE(g.why.message().find("still runs"), std::string::npos) << g.why.message();
  EXPECT_FALSE(g.reader.valid());
  // A client never asks: the daemon it talks to runs, maybe in another pid namespace.
  EXPECT_EQ(open_as(w, ControlOpener::kClient).grade, ControlGrade::kReady);

  daemon.end();  // exited and reaped: its pid names nothing now
  g = open_as(w, ControlOpener::kSuccessor);
  EXPECT_EQ(g.grade, ControlGrade::kDead) << g.why.message();
  EXPECT_TRUE(g.reader.valid());
}

TEST(ControlGradedOpen, ASuccessorTakesAPidReusedByAnotherProgramAsGone) {
  ControlWriter w = make_writer();
  w.publish_ready();
  OtherProgram other;
  ASSERT_GT(other.pid, 0);
  w.header().daemon_pid = other.pid;
  GradedControl g = open_as(w, ControlOpener::kSuccessor);
  EXPECT_EQ(g.grade, ControlGrade::kDead) << g.why.message();
  EXPECT_TRUE(g.reader.valid());
}

TEST(ControlGradedOpen, ASuccessorReadsWhatADeadDaemonLeftInAnyState) {
  // Its own pid recorded (a successor in a fresh pid namespace may be given it), and a
  // daemon that died starting, serving or stopping.
  for (int state = 0; state < 3; ++state) {
    ControlWriter w = make_writer();
    if (state >= 1) w.publish_ready();
    if (state == 2) w.publish_stopping();
    GradedControl g = open_as(w, ControlOpener::kSuccessor);
    EXPECT_EQ(g.grade, ControlGrade::kDead) << state << ": " << g.why.message();
    ASSERT_TRUE(g.reader.valid());
    EXPECT_EQ(g.reader.max_clients(), 4u);
    EXPECT_EQ(g.reader.num_pools(), 0u);
    EXPECT_EQ(g.header, &g.reader.header());
  }
}

}  // namespace
}  // namespace kvpool::shm
