// The runtime's own figure for a method's planned memory, for
// tests/jobs/test_export.py: loads a .pte with ExecuTorch's C++ runtime (the
// wheel's libexecutorch) and prints MethodMeta::memory_planned_buffer_size(i),
// one line per buffer: what its loaders allocate before the method runs.
//
//   planned_memory PROGRAM.pte METHOD
#include <cstdio>
#include <fstream>
#include <iterator>
#include <utility>
#include <vector>

#include <executorch/runtime/executor/program.h>
#include <executorch/runtime/platform/runtime.h>

namespace rt = executorch::runtime;

// extension/data_loader/buffer_data_loader.h needs c10 headers the wheel does not ship.
class VectorLoader final : public rt::DataLoader {
 public:
  explicit VectorLoader(std::vector<char> data) : data_(std::move(data)) {}

  rt::Result<rt::FreeableBuffer> load(size_t offset, size_t size, const SegmentInfo&) const override {
    if (offset > data_.size() || size > data_.size() - offset) return rt::Error::InvalidArgument;
    return rt::FreeableBuffer(data_.data() + offset, size, nullptr);
  }

  rt::Result<size_t> size() const override { return data_.size(); }

 private:
  std::vector<char> data_;
};

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: planned_memory PROGRAM.pte METHOD\n");
    return 2;
  }
  std::ifstream in(argv[1], std::ios::binary);
  VectorLoader loader(std::vector<char>((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>()));
  rt::runtime_init();
  auto program = rt::Program::load(&loader);
  if (!program.ok()) return 3;
  auto meta = program->method_meta(argv[2]);
  if (!meta.ok()) return 4;
  for (size_t i = 0; i < meta->num_memory_planned_buffers(); ++i) {
    auto size = meta->memory_planned_buffer_size(i);
    if (!size.ok()) return 5;
    std::printf("%lld\n", static_cast<long long>(size.get()));
  }
  return 0;
}
