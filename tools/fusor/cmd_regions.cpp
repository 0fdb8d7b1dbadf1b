// `fusor regions MODEL`: the regions discovery finds in a model (SPEC §6) and why each
// remaining op stays unfused.
#include <iostream>
#include <memory>

#include "cli_common.hpp"
#include "commands.hpp"
#include "fusor/discovery.hpp"
#include "fusor/model_run.hpp"

namespace fusor::cli {

Command add_regions_command(CLI::App& app) {
  struct Options {
    std::string model;
    bool print_graph = false;
    bool allow_reference = false;
  };
  auto o = std::make_shared<Options>();
  CLI::App* sub =
      app.add_subcommand("regions", "List the regions discovered in a model and why each other op stays unfused");
  sub->add_option("MODEL", o->model, "A .onnx model or an op-graph text file (.graph)")->required();
  sub->add_flag("--graph", o->print_graph, "Also print the imported op graph (large constants elided)");
  sub->add_flag("--allow-reference", o->allow_reference,
                "Import ONNX ops outside fusor's set that the reference evaluator runs (Cos, Elu, Clip, "
                "ReduceL2, LogSoftmax...; the list: fusor check-onnx --help) as unfused ref.<Op> nodes instead of "
                "failing");
  sub->footer("Discovery order: gated matmuls, matmul chains, norm chains, attention, pointwise DAGs; only\n"
              "values with a single consumer are fused. Shapes come from the model's declared input shapes.");
  return {sub, [o] {
            auto graph = load_model(o->model, {.allow_reference = o->allow_reference});
            if (!graph) return fail(o->model, graph.error());
            if (o->print_graph) std::cout << print_graph(*graph, {.max_inline = 16});
            auto types = infer_value_types(*graph);
            if (!types) return fail(o->model, types.error());
            const Discovery d = discover_regions(*graph, *types);
            std::cout << "model: " << o->model << " (" << graph->nodes.size() << " ops after import)\n"
                      << format_discovery(*graph, d);
            return kExitOk;
          }};
}

} // namespace fusor::cli
