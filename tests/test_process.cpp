// run_process: output capture, exit status, signals, timeouts, stdin, missing programs.
#include <gtest/gtest.h>

#include <csignal>

#include "fusor/toolchain.hpp"

using namespace fusor;
using namespace std::chrono_literals;

TEST(Process, EchoCapturesStdoutAndExitZero) {
  auto r = run_process({"echo", "hello", "world"}, 10s);
  ASSERT_TRUE(r.ok()) << r.error().str();
  EXPECT_EQ(r->out, "hello world\n");
  EXPECT_EQ(r->err, "");
  EXPECT_EQ(r->exit_code, 0);
  EXPECT_EQ(r->term_signal, 0);
  EXPECT_FALSE(r->timed_out);
  EXPECT_TRUE(r->succeeded());
}

TEST(Process, ArgumentsAreNotInterpretedByAShell) {
  // With a shell these would expand, redirect or run a second command.
  auto r = run_process({"printf", "%s|", "$HOME", "a b", "; rm -rf x", "*", "'q'"}, 10s);
  ASSERT_TRUE(r.ok()) << r.error().str();
  EXPECT_EQ(r->out, "$HOME|a b|; rm -rf x|*|'q'|");
}

TEST(Process, LargeOutputOnBothPipesDoesNotDeadlock) {
  // 1 MiB on stdout and 1 MiB on stderr, interleaved: far more than a 64 KiB pipe buffer.
  auto r = run_process({"sh", "-c",
                        "head -c 1048576 /dev/zero | tr '\\0' a; head -c 1048576 /dev/zero | tr '\\0' b >&2; "
                        "head -c 1000 /dev/zero | tr '\\0' c"},
                       60s);
  ASSERT_TRUE(r.ok()) << r.error().str();
  ASSERT_EQ(r->out.size(), 1048576u + 1000u);
  ASSERT_EQ(r->err.size(), 1048576u);
  EXPECT_EQ(r->out.find_first_not_of('a'), 1048576u);
  EXPECT_EQ(r->out.substr(1048576), std::string(1000, 'c'));
  EXPECT_EQ(r->err.find_first_not_of('b'), std::string::npos);
  EXPECT_TRUE(r->succeeded());
}

TEST(Process, NonzeroExitAndStderr) {
  auto r = run_process({"sh", "-c", "echo oops >&2; exit 3"}, 10s);
  ASSERT_TRUE(r.ok()) << r.error().str();
  EXPECT_EQ(r->exit_code, 3);
  EXPECT_EQ(r->err, "oops\n");
  EXPECT_FALSE(r->succeeded());
}

TEST(Process, TerminatingSignalIsReported) {
  auto r = run_process({"sh", "-c", "kill -SEGV $$"}, 10s);
  ASSERT_TRUE(r.ok()) << r.error().str();
  EXPECT_EQ(r->term_signal, SIGSEGV);
  EXPECT_FALSE(r->timed_out);
  EXPECT_FALSE(r->succeeded());
}

TEST(Process, TimeoutKillsChildAndGrandchildren) {
  // The grandchild sleep holds stdout open; killing only sh would leave us waiting for EOF.
  auto start = std::chrono::steady_clock::now();
  auto r = run_process({"sh", "-c", "echo started; sleep 30; echo never"}, 300ms);
  auto took = std::chrono::steady_clock::now() - start;
  ASSERT_TRUE(r.ok()) << r.error().str();
  EXPECT_TRUE(r->timed_out);
  EXPECT_EQ(r->term_signal, SIGKILL);
  EXPECT_EQ(r->out, "started\n");
  EXPECT_LT(took, 5s);
  EXPECT_GE(took, 300ms);
}

TEST(Process, ChildThatClosesPipesButKeepsRunningIsBoundedByTimeout) {
  auto start = std::chrono::steady_clock::now();
  auto r = run_process({"sh", "-c", "exec >/dev/null 2>&1; sleep 30"}, 300ms);
  ASSERT_TRUE(r.ok()) << r.error().str();
  EXPECT_TRUE(r->timed_out);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
}

TEST(Process, StdinIsDelivered) {
  std::string big(300000, 'x');
  big += "END";
  auto r = run_process({"wc", "-c"}, 10s, big);
  ASSERT_TRUE(r.ok()) << r.error().str();
  EXPECT_EQ(std::stoul(r->out), big.size());
}

TEST(Process, ChildIgnoringStdinDoesNotKillUs) {
  // The child exits without reading; writing the rest must not raise SIGPIPE here.
  auto r = run_process({"true"}, 10s, std::string(1 << 20, 'z'));
  ASSERT_TRUE(r.ok()) << r.error().str();
  EXPECT_EQ(r->exit_code, 0);
}

TEST(Process, NoStdinMeansEmptyStdin) {
  auto r = run_process({"wc", "-c"}, 10s);
  ASSERT_TRUE(r.ok()) << r.error().str();
  EXPECT_EQ(std::stoul(r->out), 0u);
}

TEST(Process, MissingProgramIsAnErrorValue) {
  auto r = run_process({"fusor-no-such-program-xyz", "--version"}, 10s);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, ErrorCode::io_error);
  EXPECT_NE(r.error().message.find("fusor-no-such-program-xyz"), std::string::npos);
  auto abs = run_process({"/nonexistent/dir/prog"}, 10s);
  ASSERT_FALSE(abs.ok());
  EXPECT_NE(abs.error().message.find("/nonexistent/dir/prog"), std::string::npos);
}

TEST(Process, EmptyArgvIsBadArgument) {
  auto r = run_process({}, 10s);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, ErrorCode::bad_argument);
}
