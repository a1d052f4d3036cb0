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
//
// Memory. A worker starts a chunk every chunk_rows rows for the whole run (about one a second per table on
// a busy worker), and each is large (a column of 64 Ki rows is 64-512 KiB). Taken from malloc, such blocks
// first come from mmap; the first one freed raises glibc's mmap threshold above their size, and from then
// on they come from the heap, where the small blocks of messages fill the holes they leave: in soaks of
// 5-15 minutes the heap's footprint crept up by 1-9 MB a minute while what it held stayed flat. So a chunk
// maps its own memory (one anonymous mapping for all its columns; the heap only under AddressSanitizer, see
// trace.cc), and a forgotten chunk, once no reader holds it, goes back to its table's pool (ChunkPool) for
// the writer's next chunk; only spares beyond the pool's few are unmapped.
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
  // Takes its columns' memory (throws std::bad_alloc when the system refuses).
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
  // A pooled chunk made the writer's again, empty, its first row `first` (no reader holds it: ChunkPool).
  void reuse(int64_t first) {
    first_ = first;
    rows_.store(0, std::memory_order_relaxed);
  }

 private:
  std::vector<void*> data_;
  void* mapping_ = nullptr;
  size_t mapped_ = 0;
  int64_t capacity_, first_;
  std::atomic<int64_t> rows_{0};
};

// Chunks of one table that no one holds any more, kept for the table's next chunks (header: Memory). Shared
// by the table and its chunks' deleters, which may run on any thread (the driver forgetting a chunk, Python
// dropping the last array over it) and after the table is gone.
class ChunkPool {
 public:
  static constexpr size_t kSpares = 2;  // chunks kept for reuse; beyond them a returned chunk is unmapped
  ChunkPool() { spare_.reserve(kSpares); }
  std::unique_ptr<Chunk> take();
  void give(Chunk* chunk) noexcept;  // the chunk's last owner let go of it
  int64_t made() const { return made_.load(std::memory_order_relaxed); }
  int64_t reused() const { return reused_.load(std::memory_order_relaxed); }
  void count_made() { made_.fetch_add(1, std::memory_order_relaxed); }

 private:
  std::mutex mu_;
  std::vector<std::unique_ptr<Chunk>> spare_;  // capacity kSpares, reserved: give() never allocates
  std::atomic<int64_t> made_{0}, reused_{0};
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
  // Chunks mapped for this table, and pooled chunks reused, so far (tests: a long run maps a bounded number).
  int64_t chunks_made() const { return pool_->made(); }
  int64_t chunks_reused() const { return pool_->reused(); }

 private:
  std::shared_ptr<Chunk> make_chunk(int64_t first);  // a pooled chunk, or a new one

  std::vector<Column> columns_;
  int64_t chunk_rows_;
  std::shared_ptr<ChunkPool> pool_ = std::make_shared<ChunkPool>();
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
