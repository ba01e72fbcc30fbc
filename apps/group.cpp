#include "apps/group.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>

#if GPT2VK_MPI
#include <mpi.h>
#endif

namespace app {
namespace {

// The job's size as mpirun's environment gives it (OpenMPI, then MPICH's PMI); 0 outside one.
uint32_t launched_size() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"})
    if (const char* v = std::getenv(name); v && *v) return static_cast<uint32_t>(std::strtoul(v, nullptr, 10));
  return 0;
}

#if GPT2VK_MPI
void check(int rc, const char* call) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  throw std::runtime_error(std::string(call) + " failed: " + std::string(text, size_t(len)));
}
#endif

}  // namespace

bool built_with_mpi() { return GPT2VK_MPI != 0; }

Group::Group() {
  const uint32_t launched = launched_size();
#if GPT2VK_MPI
  if (launched == 0) return;
  check(MPI_Init(nullptr, nullptr), "MPI_Init");
  mpi_ = true;
  // A failed collective ends the job (MPI's default for the world communicator), never a hang.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
  int r = 0, n = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  rank_ = static_cast<uint32_t>(r), size_ = static_cast<uint32_t>(n);
  MPI_Comm node;
  check(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, r, MPI_INFO_NULL, &node),
        "MPI_Comm_split_type");
  MPI_Comm_rank(node, &r);
  local_rank_ = static_cast<uint32_t>(r);
  MPI_Comm_free(&node);
#else
  if (launched > 1)
    throw std::runtime_error("this gpt2vk was built without MPI, and mpirun started " +
                             std::to_string(launched) +
                             " copies of it: each would train the whole run alone. Build it "
                             "with MPI (libopenmpi-dev, scripts/setup.sh) or run one process");
#endif
}

Group::~Group() {
#if GPT2VK_MPI
  if (mpi_) MPI_Finalize();
#endif
}

void Group::allgather(std::span<const float> mine, std::span<float> all) const {
  if (all.size() != mine.size() * size_) throw std::invalid_argument("allgather: all is not size x mine");
#if GPT2VK_MPI
  if (mpi_) {
    // Counts past INT_MAX go as blocks of floats.
    constexpr size_t kBlock = 1 << 16;
    MPI_Datatype type = MPI_FLOAT;
    size_t count = mine.size();
    if (count > size_t{1} << 30 && count % kBlock == 0) {
      MPI_Type_contiguous(kBlock, MPI_FLOAT, &type);
      MPI_Type_commit(&type);
      count /= kBlock;
    }
    if (count > size_t{1} << 30) throw std::runtime_error("allgather: too many floats for one call");
    check(MPI_Allgather(mine.data(), int(count), type, all.data(), int(count), type, MPI_COMM_WORLD),
          "MPI_Allgather");
    if (type != MPI_FLOAT) MPI_Type_free(&type);
    return;
  }
#endif
  std::copy(mine.begin(), mine.end(), all.begin());
}

std::vector<uint64_t> Group::allgather(std::span<const uint64_t> mine) const {
  std::vector<uint64_t> all(mine.size() * size_);
#if GPT2VK_MPI
  if (mpi_) {
    check(MPI_Allgather(mine.data(), int(mine.size()), MPI_UINT64_T, all.data(), int(mine.size()),
                        MPI_UINT64_T, MPI_COMM_WORLD),
          "MPI_Allgather");
    return all;
  }
#endif
  std::copy(mine.begin(), mine.end(), all.begin());
  return all;
}

bool Group::any(bool mine) const {
#if GPT2VK_MPI
  if (mpi_) {
    int in = mine ? 1 : 0, out = 0;
    check(MPI_Allreduce(&in, &out, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD), "MPI_Allreduce");
    return out != 0;
  }
#endif
  return mine;
}

void Group::abort(const std::string& message) const {
  std::fprintf(stderr, "%s\n", message.c_str());
  std::fflush(stderr);
#if GPT2VK_MPI
  if (mpi_) MPI_Abort(MPI_COMM_WORLD, 1);
#endif
  std::exit(1);
}

}  // namespace app
