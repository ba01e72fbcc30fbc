// The processes of a data-parallel training job: the ranks mpirun started (MPI, where the build
// has it), or this process alone. Plain collectives over bytes and floats; what they carry and
// in which order is apps/train.cpp's and model/training/gpu_trainer.h's (Share).
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace app {

class Group {
 public:
  // Joins the job where mpirun's environment says this process is one of its ranks
  // (OMPI_COMM_WORLD_SIZE, PMI_SIZE); alone otherwise, without starting MPI. In a build without
  // MPI, a job of two or more ranks is refused: each would train the whole run by itself.
  Group();
  ~Group();  // MPI_Finalize, where MPI was started
  Group(const Group&) = delete;
  Group& operator=(const Group&) = delete;

  uint32_t rank() const { return rank_; }
  uint32_t size() const { return size_; }
  uint32_t local_rank() const { return local_rank_; }  // among the ranks on this machine
  bool lead() const { return rank_ == 0; }  // the rank that writes: checkpoints, logs, lines

  // Every rank's `mine` (of one length on all) into `all`, [size][mine.size()], in rank order.
  void allgather(std::span<const float> mine, std::span<float> all) const;
  std::vector<uint64_t> allgather(std::span<const uint64_t> mine) const;
  // Whether any rank's `mine` is true.
  bool any(bool mine) const;
  // Ends the whole job: `message` on stderr, then MPI_Abort (mpirun ends the other ranks and
  // exits non-zero). Alone: exits with 1.
  [[noreturn]] void abort(const std::string& message) const;

 private:
  uint32_t rank_ = 0, size_ = 1, local_rank_ = 0;
  bool mpi_ = false;  // MPI_Init ran
};

// Whether this binary was built with MPI.
bool built_with_mpi();

}  // namespace app
