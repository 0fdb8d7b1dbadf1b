// Probe families (SPEC §4): the inputs the oracle runs a kernel on.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fusor/kernel.hpp"
#include "fusor/operands.hpp"
#include "fusor/oracle.hpp"
#include "fusor/region.hpp"
#include "fusor/tensor.hpp"

namespace fusor::probing {

struct Probe {
  ProbeFamily family;
  ProblemShape dims;
  std::string shape_text;
  std::uint64_t seed = 0;
  std::vector<Tensor> operands;
  bool bit_exact = false; // every value exact in f32: any difference is a logic bug
};

// Every probe that applies to `region`, restricted to what `source`'s spec policy can run
// (a static kernel gets its own dims only, a bucket kernel dims within its bucket).
std::vector<Probe> make_probes(const Region& region, const KernelSource& source);

} // namespace fusor::probing
