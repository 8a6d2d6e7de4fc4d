#include "prefault.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>

namespace kvpool::peer {

void populate_pages(std::vector<ByteRun> runs, bool for_write) {
  static const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  std::sort(runs.begin(), runs.end(),
            [](const ByteRun& a, const ByteRun& b) { return a.data < b.data; });
  const int advice = for_write ? MADV_POPULATE_WRITE : MADV_POPULATE_READ;
  auto flush = [&](uintptr_t begin, uintptr_t end) {
    begin &= ~(page - 1);  // madvise wants a page-aligned start
    (void)::madvise(reinterpret_cast<void*>(begin), end - begin, advice);
  };
  uintptr_t begin = 0, end = 0;
  for (const ByteRun& r : runs) {
    const auto b = reinterpret_cast<uintptr_t>(r.data);
    if (r.bytes == 0) continue;
    if (end != 0 && b <= end) {
      end = std::max(end, b + r.bytes);
      continue;
    }
    if (end != 0) flush(begin, end);
    begin = b;
    end = b + r.bytes;
  }
  if (end != 0) flush(begin, end);
}

void PageMap::populate(const std::vector<uint32_t>& ids, const std::vector<ByteRun>& runs,
                       bool for_write) {
  const uint8_t want = for_write ? kWrite : kRead;
  std::vector<ByteRun> todo;
  for (size_t i = 0; i < ids.size() && i < runs.size(); ++i) {
    if (ids[i] >= state_.size() || state_[ids[i]] >= want) continue;
    todo.push_back(runs[i]);
    state_[ids[i]] = want;
  }
  if (!todo.empty()) populate_pages(std::move(todo), for_write);
}

}  // namespace kvpool::peer
