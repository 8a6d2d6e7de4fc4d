// kvpool_paced_bench's output: the latency tables, the ratios, and issue 13's targets
// judged on the same run.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "paced_cells.hpp"
#include "paced_cpu.hpp"

namespace kvpool::bench {

// p50 / p99 of every cell, per op; then kvpool's p50 as ratios to the others'.
void print_tables(Results& results, const std::vector<Placement>& placements,
                  const std::vector<double>& gaps, const std::vector<int>& ops, uint32_t blocks);
void print_idle_cpu(const IdleCpu& cpu, double seconds);
// Each target of issue 13 this run can judge, met or not, with the figures behind it.
void print_targets(Results& results, const std::vector<Placement>& placements,
                   const std::vector<double>& gaps, const std::vector<int>& ops,
                   const std::optional<IdleCpu>& cpu);

}  // namespace kvpool::bench
