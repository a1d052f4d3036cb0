// A worker's trace rows (trace/buffers.py WorkerBuffer), written without a lock by the worker and read
// in place by Python: events (node, phase, key, depth, messages, start, end), bundle members (event row,
// key, time) and staleness (node, key, value, time), each a table of chunks of `chunk_rows` rows.
//
// A chunk holds one array per column (the dtypes of trace/buffers.py's columns) and an atomic count of
// complete rows: the writer fills a row's columns, then publishes the count with release semantics, so a
// reader that loads it with acquire sees every column of those rows. Full chunks stay where they are
// (never written again); the writer starts a new one. Python wraps each column as a numpy array over the
// chunk's memory (no copy; the array keeps the chunk alive) and reads rows [0, count).
// Dropping old chunks beyond a capacity, and the totals of dropped rows, stay with the Python reader
// (engine/trace.py), which tells the writer which chunks it may forget.
// Never touches Python (module.cc wraps the chunks), messages or kernels.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common.h"

namespace amp {

struct Column {
  std::string name;
  char code;  // array.array / numpy typecode: 'i' int32, 'b' int8, 'q' int64, 'd' float64
};

class Chunk {
 public:
  Chunk(const std::vector<Column>& columns, int64_t capacity, int64_t first);
  ~Chunk();
  Chunk(const Chunk&) = delete;
  Chunk& operator=(const Chunk&) = delete;
  template <class T>
  T* column(int i) { return static_cast<T*>(data_[i]); }
  void* raw(int i) const { return data_[i]; }
  int64_t rows() const { return rows_.load(std::memory_order_acquire); }
  void publish(int64_t rows) { rows_.store(rows, std::memory_order_release); }
  int64_t capacity() const { return capacity_; }
  int64_t first() const { return first_; }  // absolute index of its first row

 private:
  std::vector<void*> data_;
  int64_t capacity_, first_;
  std::atomic<int64_t> rows_{0};
};

// One kind of row: a list of chunks; the writer appends to the last one.
class RowTable {
 public:
  RowTable(std::vector<Column> columns, int64_t chunk_rows);
  const std::vector<Column>& columns() const { return columns_; }
  // Writer: the chunk and row to fill next (a new chunk when the last is full); then publish(row + 1).
  Chunk& next_row(int64_t* row);
  int64_t written() const;  // rows published
  // Readers: the chunks held now (shared: a reader keeps its chunks alive after they are forgotten).
  std::vector<std::shared_ptr<Chunk>> chunks();
  // Forget chunks wholly before absolute row `before` (the reader has folded them into its totals).
  void forget_before(int64_t before);

 private:
  std::vector<Column> columns_;
  int64_t chunk_rows_;
  std::mutex mu_;  // guards the chunk list (taken when a chunk is added or listed: once per chunk_rows rows)
  std::vector<std::shared_ptr<Chunk>> chunks_;
  Chunk* current_ = nullptr;  // the writer's chunk (owned by chunks_ or by a reader's copy)
  std::shared_ptr<Chunk> current_owner_;
};

class TraceBuffer {
 public:
  explicit TraceBuffer(int64_t chunk_rows);
  void record(int32_t node, int8_t phase, int64_t key, double start, double end, int32_t depth, int32_t messages = 1);
  void record_bundle(int32_t node, int8_t phase, Span<const int64_t> keys, double start, double end, int32_t depth);
  void record_staleness(int32_t node, int64_t key, int32_t staleness, double time);
  RowTable events, members, staleness;
};

}  // namespace amp
