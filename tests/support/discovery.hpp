// Discovery on a graph written in the op-graph text form, for discovery tests.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "fusor/discovery.hpp"
#include "fusor/graph.hpp"
#include "fusor/graph_exec.hpp"

namespace fusor::testing {

struct Found {
  Graph graph;
  Discovery d;
};

inline Found discover(const std::string& text) {
  auto g = parse_graph(text);
  EXPECT_TRUE(g.ok()) << g.error().str();
  auto types = infer_value_types(*g);
  EXPECT_TRUE(types.ok()) << types.error().str();
  Discovery d = discover_regions(*g, *types);
  return {std::move(*g), std::move(d)};
}

} // namespace fusor::testing
