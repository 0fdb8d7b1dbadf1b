// fusor-cuda-sandbox JOB RESULT: runs every call of a cuda sandbox job (cuda_isolated.cpp)
// in order in this fresh process and writes the outputs, or stops at the first call that
// faults, trips a guard, or reports a kernel status, saying so in one protocol line.
// Built as its own executable (not part of fusor_core).
#include <fstream>
#include <iostream>
#include <iterator>

#include "fusor/sandbox.hpp"
#include "targets/cuda/cuda_exec.hpp"
#include "targets/cuda/cuda_sandbox_protocol.hpp"

using namespace fusor;

namespace {

int stop(int code, const std::string& line) {
  std::cerr << cuda::sandbox_protocol::kLinePrefix << line << std::endl;
  return code;
}

} // namespace

int main(int argc, char** argv) {
  using namespace sandbox_wire;
  if (argc != 3) return stop(kExitBadJob, "error job: usage: fusor-cuda-sandbox JOB RESULT");
  std::ifstream jf(argv[1], std::ios::binary);
  const std::string bytes(std::istreambuf_iterator<char>(jf), {});
  auto job = decode_job(bytes);
  if (!job) return stop(kExitBadJob, "error job: " + job.error().str());
  const size_t nl = job->entry.find('\n');
  if (nl == std::string::npos) return stop(kExitBadJob, "error job: the entry carries no launch line");
  const std::string entry = job->entry.substr(0, nl);
  auto spec = cuda::parse_launch(std::string_view(job->entry).substr(nl + 1));
  if (!spec) return stop(kExitBadJob, "error job: " + spec.error().str());

  auto d = cuda::driver();
  if (!d) return stop(cuda::sandbox_protocol::kExitUnavailable, "unavailable: " + d.error().str());
  std::ifstream cf(job->so_path, std::ios::binary);
  const std::string image(std::istreambuf_iterator<char>(cf), {});
  if (image.empty()) return stop(kExitLoad, "error load: cannot read " + job->so_path);
  auto kernel = cuda::LoadedKernel::load(**d, image, entry, *spec);
  if (!kernel) return stop(kExitLoad, "error load: " + kernel.error().str());

  std::vector<std::vector<float>> outputs;
  for (size_t i = 0; i < job->calls.size(); ++i) {
    const std::string call = "call=" + std::to_string(i);
    cuda::CallOptions options;
    options.check_operands = true; // a kernel writing into its inputs is reported
    auto r = cuda::run_call(**d, **kernel, job->calls[i], options);
    if (!r) return stop(kExitIo, "error driver " + call + ": " + r.error().str());
    switch (r->kind) {
    case cuda::CallResult::Kind::ok: break;
    case cuda::CallResult::Kind::fault: return stop(kExitFault, "fault " + call + " " + r->detail);
    case cuda::CallResult::Kind::out_of_bounds_write: return stop(kExitFault, "oob " + call + " " + r->detail);
    case cuda::CallResult::Kind::kernel_error:
      return stop(kExitKernelError, "kernel-error " + call + " rc=" + std::to_string(r->status));
    }
    outputs.push_back(std::move(r->output));
  }
  std::ofstream rf(argv[2], std::ios::binary);
  const std::string result = encode_outputs(outputs);
  rf.write(result.data(), static_cast<std::streamsize>(result.size()));
  if (!rf) return stop(kExitIo, "error io: cannot write " + std::string(argv[2]));
  return 0;
}
