// Crash isolation for the oracle: native kernel calls run in a separate, freshly exec'd
// child process (fusor-sandbox) whose buffers sit between PROT_NONE guard pages, so a
// kernel that crashes, hangs, or writes out of bounds becomes an outcome, never a crash of
// the process that asked.
//
// Buffer layout in the child (per call; every buffer has its own mapping):
//
//   [ 64 KiB PROT_NONE ][ slack | buffer bytes ][ 64 KiB PROT_NONE ]
//                                             ^ the buffer's END touches the trailing guard
//
// * The end is aligned to the trailing guard because running past the end is the common
//   bug: a write (or read) of element n faults at once. Buffers are therefore only as
//   aligned as their size makes them (the ABI promises element alignment, nothing more).
// * The output's slack (the bytes between the leading guard and the start, < 1 page) is
//   filled with a canary and checked after each call, so out[-1] is caught even though it
//   does not fault; writes further before the start fault in the leading guard.
// * Operand buffers, the operand pointer table and the dims array are read-only: a kernel
//   writing into its inputs is reported, as is any read outside them.
// * The output starts filled with the NaN pattern kUnwrittenBits, so elements a kernel never
//   wrote show up as NaN in the outputs.
// Accesses beyond the 64 KiB guards land wherever they land (usually a plain SIGSEGV).
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "fusor/error.hpp"
#include "fusor/tensor.hpp"

namespace fusor {

struct KernelCall {                 // one invocation of a kernel entry
  std::vector<ByteBuffer> operands; // raw bytes of each operand buffer, in ABI order, on cache lines
  std::vector<std::int64_t> dims;   // the ABI dims array
  std::int64_t output_elems = 0;    // f32 elements the kernel writes
};

struct SandboxOutcome {
  enum class Kind { ok, kernel_error, crashed, timed_out, out_of_bounds_write };
  Kind kind = Kind::ok;
  int failed_call = -1; // index of the call that failed (-1: before the first call began)
  int signal = 0;       // for crashed (0 when the child exited instead of dying by a signal)
  int return_code = 0;  // for kernel_error (entry returned nonzero)
  // Human text: "SIGSEGV", "SIGABRT", "timeout after 2000 ms in call 3",
  // "out-of-bounds write to the output of call 3: byte 64 of a 64-byte buffer (element 16 of 16)"...
  std::string detail;
  std::vector<std::vector<float>> outputs; // one per call when ok
};

std::string_view sandbox_kind_name(SandboxOutcome::Kind kind);

// "SIGSEGV", "SIGABRT", ... for the usual crash signals, else "signal N".
std::string signal_display_name(int sig);

// Runs every call of `entry` from the shared object at `so_path` in ONE child process (a
// fresh exec, not a bare fork: the parent may have OpenMP threads and libgomp is not
// fork-safe), in order, stopping at the first failing call. `timeout` bounds the whole job.
// Errors (cannot start the child, missing .so or entry, bad files) are Error values; a
// misbehaving kernel is an outcome.
Expected<SandboxOutcome> run_sandboxed(const std::filesystem::path& so_path, const std::string& entry,
                                       std::span<const KernelCall> calls, std::chrono::milliseconds timeout);

// Where the fusor-sandbox executable is: FUSOR_SANDBOX env, else next to /proc/self/exe,
// else the build-time path.
Expected<std::filesystem::path> sandbox_executable();

// The protocol between run_sandboxed and fusor-sandbox. Both sides are built from this one
// definition, so the job and result formats cannot drift apart.
namespace sandbox_wire {

// Bits every output element starts with: a quiet NaN with a recognisable payload.
inline constexpr std::uint32_t kUnwrittenBits = 0x7fc0dead;
inline constexpr std::size_t kGuardBytes = 64 * 1024;

// Child exit statuses. Each comes with a "FUSOR_SANDBOX ..." line on stderr; a status
// without its line means the kernel itself called exit().
inline constexpr int kExitFault = 81;       // "FUSOR_SANDBOX fault access=... call=... buffer=... offset=... size=..."
inline constexpr int kExitKernelError = 82; // "FUSOR_SANDBOX kernel-error call=I rc=N"
inline constexpr int kExitLoad = 83;        // "FUSOR_SANDBOX error load: <message>"
inline constexpr int kExitBadJob = 84;      // "FUSOR_SANDBOX error job: <message>"
inline constexpr int kExitIo = 85;          // "FUSOR_SANDBOX error io: <message>"

// Buffer ids in fault lines: operand k is k >= 0.
inline constexpr int kBufferOutput = -1;
inline constexpr int kBufferOperandTable = -2;
inline constexpr int kBufferDims = -3;

struct Job {
  std::string so_path;
  std::string entry;
  std::vector<KernelCall> calls;
};

// Native-endian, length-prefixed (u64) binary; parent and child run on the same host.
std::string encode_job(const Job& job);
Expected<Job> decode_job(std::string_view bytes); // E_INTERNAL naming what is malformed

std::string encode_outputs(std::span<const std::vector<float>> outputs);
Expected<std::vector<std::vector<float>>> decode_outputs(std::string_view bytes);

} // namespace sandbox_wire

} // namespace fusor
