// Child processes without a shell: posix_spawnp, stdout/stderr drained together with poll
// (a child blocked on a full stderr pipe while we wait on stdout would deadlock), and a
// timeout that kills the child's whole process group (a compiler driver's cc1/as/ld too).
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include <signal.h>

#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fusor/toolchain.hpp"

extern char** environ;

namespace fusor {

namespace {

using Clock = std::chrono::steady_clock;

class Fd {
public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) {
      reset();
      fd_ = std::exchange(o.fd_, -1);
    }
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { reset(); }
  int get() const { return fd_; }
  void reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

private:
  int fd_ = -1;
};

Error spawn_error(const std::string& what, const std::string& program, int err) {
  return make_error(ErrorCode::io_error, what + " '" + program + "': " + std::strerror(err));
}

std::string argv_text(const std::vector<std::string>& argv) {
  std::string s;
  for (const auto& a : argv) s += (s.empty() ? "" : " ") + a;
  return s;
}

struct SpawnAttrs {
  posix_spawn_file_actions_t actions;
  posix_spawnattr_t attr;
  SpawnAttrs() {
    posix_spawn_file_actions_init(&actions);
    posix_spawnattr_init(&attr);
  }
  ~SpawnAttrs() {
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attr);
  }
  SpawnAttrs(const SpawnAttrs&) = delete;
  SpawnAttrs& operator=(const SpawnAttrs&) = delete;
};

} // namespace

Expected<ProcessResult> run_process(const std::vector<std::string>& argv, std::chrono::milliseconds timeout,
                                    const std::string& stdin_text) {
  if (argv.empty() || argv[0].empty()) return make_error(ErrorCode::bad_argument, "run_process: empty argv");
  const std::string& program = argv[0];

  // O_CLOEXEC on every end: a child spawned concurrently by another thread must not inherit
  // our pipes (it would hold them open and delay EOF). dup2 onto 0/1/2 clears the flag.
  int out_pipe[2], err_pipe[2];
  if (::pipe2(out_pipe, O_CLOEXEC) != 0) return spawn_error("cannot create pipe for", program, errno);
  Fd out_r(out_pipe[0]), out_w(out_pipe[1]);
  if (::pipe2(err_pipe, O_CLOEXEC) != 0) return spawn_error("cannot create pipe for", program, errno);
  Fd err_r(err_pipe[0]), err_w(err_pipe[1]);
  // stdin is a socket so that writing to a child that exits early fails with EPIPE via
  // MSG_NOSIGNAL instead of raising SIGPIPE in this process.
  Fd in_w, in_r;
  if (!stdin_text.empty()) {
    int sv[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
      return spawn_error("cannot create stdin socket for", program, errno);
    in_w = Fd(sv[0]);
    in_r = Fd(sv[1]);
    ::shutdown(in_r.get(), SHUT_WR);
  }

  SpawnAttrs sa;
  if (in_r.get() >= 0)
    posix_spawn_file_actions_adddup2(&sa.actions, in_r.get(), STDIN_FILENO);
  else
    posix_spawn_file_actions_addopen(&sa.actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&sa.actions, out_w.get(), STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&sa.actions, err_w.get(), STDERR_FILENO);
  // Own process group, so a timeout kills the grandchildren too; default signal handling
  // and an empty mask, whatever the parent uses.
  sigset_t empty, all;
  sigemptyset(&empty);
  sigfillset(&all);
  posix_spawnattr_setpgroup(&sa.attr, 0);
  posix_spawnattr_setsigmask(&sa.attr, &empty);
  posix_spawnattr_setsigdefault(&sa.attr, &all);
  posix_spawnattr_setflags(&sa.attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);

  std::vector<char*> cargv;
  cargv.reserve(argv.size() + 1);
  for (const auto& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);

  const auto start = Clock::now();
  pid_t pid = 0;
  // glibc's posix_spawnp reports exec failure (ENOENT, EACCES) as its return value.
  if (int rc = ::posix_spawnp(&pid, program.c_str(), &sa.actions, &sa.attr, cargv.data(), environ); rc != 0)
    return spawn_error("cannot start", program, rc);
  out_w.reset();
  err_w.reset();
  in_r.reset();

  ProcessResult result;
  const auto deadline = start + timeout;
  std::size_t in_off = 0;
  if (in_w.get() >= 0) ::fcntl(in_w.get(), F_SETFL, ::fcntl(in_w.get(), F_GETFL) | O_NONBLOCK);
  char buf[65536];
  while (out_r.get() >= 0 || err_r.get() >= 0) {
    const auto now = Clock::now();
    if (now >= deadline) {
      result.timed_out = true;
      break;
    }
    pollfd fds[3];
    nfds_t n = 0;
    auto add = [&](const Fd& fd, short events) {
      if (fd.get() >= 0) fds[n++] = pollfd{fd.get(), events, 0};
    };
    add(out_r, POLLIN);
    add(err_r, POLLIN);
    add(in_w, POLLOUT);
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count();
    const int wait_ms = static_cast<int>(std::min<long long>(left + 1, 1000));
    if (::poll(fds, n, wait_ms) < 0) {
      if (errno == EINTR) continue;
      break; // cannot happen with valid fds; fall through to kill and reap
    }
    for (nfds_t i = 0; i < n; ++i) {
      if (fds[i].revents == 0) continue;
      if (fds[i].fd == in_w.get()) {
        ssize_t w = ::send(in_w.get(), stdin_text.data() + in_off, stdin_text.size() - in_off, MSG_NOSIGNAL);
        if (w > 0) in_off += static_cast<std::size_t>(w);
        if ((w < 0 && errno != EAGAIN && errno != EINTR) || in_off == stdin_text.size() ||
            (fds[i].revents & (POLLERR | POLLHUP)) != 0)
          in_w.reset(); // done, or the child stopped reading: either way it sees EOF
        continue;
      }
      Fd& src = fds[i].fd == out_r.get() ? out_r : err_r;
      std::string& dst = fds[i].fd == out_r.get() ? result.out : result.err;
      ssize_t r = ::read(src.get(), buf, sizeof buf);
      if (r > 0)
        dst.append(buf, static_cast<std::size_t>(r));
      else if (r == 0 || (errno != EINTR && errno != EAGAIN))
        src.reset();
    }
  }
  in_w.reset();
  out_r.reset();
  err_r.reset();

  // Both pipes are closed (or the time is up); a child may still run after closing them,
  // so the deadline also bounds the wait for its exit.
  int status = 0;
  bool killed = false;
  auto pause = std::chrono::microseconds(200);
  for (;;) {
    if (!killed && (result.timed_out || Clock::now() >= deadline)) {
      ::kill(-pid, SIGKILL);
      result.timed_out = killed = true;
    }
    const pid_t r = ::waitpid(pid, &status, killed ? 0 : WNOHANG);
    if (r == pid) break;
    if (r < 0 && errno != EINTR) return spawn_error("cannot wait for", argv_text(argv), errno);
    if (r == 0) {
      ::usleep(static_cast<useconds_t>(pause.count()));
      pause = std::min(pause * 2, std::chrono::microseconds(20000));
    }
  }
  result.elapsed = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
  if (WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) result.term_signal = WTERMSIG(status);
  return result;
}

} // namespace fusor
