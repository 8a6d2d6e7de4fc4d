// The C++ half of bench_match.py, as a test-only extension module: match-64 round trips
// (match + drop the result) through libkvpool's own C++ API, timed in C++ inside the same
// Python process as the Python rounds, so both run with the same caches, CPU and daemon.
//
//   kvpool_match_bench.match_loop(instance, runtime_dir, pool, hashes, calls) -> ns per call
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <chrono>
#include <stdexcept>
#include <string>
#include <vector>

#include "kvpool/client.hpp"

namespace py = pybind11;

namespace {

double match_loop(const std::string& instance, const std::string& runtime_dir,
                  const std::string& pool_name, const std::vector<kvpool::SequenceHash>& hashes,
                  long calls) {
  py::gil_scoped_release nogil;
  kvpool::ConnectOptions o;
  o.runtime_dir = runtime_dir;
  auto client = kvpool::Client::connect(instance, o);
  if (!client) throw std::runtime_error("connect: " + client.status().to_string());
  auto pool = client->pool(pool_name);
  if (!pool) throw std::runtime_error("pool: " + pool.status().to_string());
  auto round = [&](long n) {
    for (long i = 0; i < n; ++i) {
      auto r = pool->match_sequence_hashes(hashes);
      if (!r || r->size() != hashes.size())
        throw std::runtime_error("match hit " + std::to_string(r ? r->size() : 0) + " of " +
                                 std::to_string(hashes.size()));
    }
  };
  round(200);  // warm up
  auto t0 = std::chrono::steady_clock::now();
  round(calls);
  auto ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count();
  return ns / static_cast<double>(calls);
}

}  // namespace

PYBIND11_MODULE(kvpool_match_bench, m) {
  m.def("match_loop", &match_loop, py::arg("instance"), py::arg("runtime_dir"), py::arg("pool"),
        py::arg("hashes"), py::arg("calls"),
        "ns per match_sequence_hashes round trip of the C++ client (its own connection).");
}
