// MpiTypes: see mpi_types.h.
#include "backends/mpi/mpi_types.h"

#include <atomic>
#include <cstdlib>

#include "backends/mpi/mpi_check.h"
#include "common/dtype_kernels.h"
#include "common/logging.h"

namespace accord {
namespace {

// Where the op callbacks find the float16 and bfloat16 datatype handles.
//
// Why a process-wide slot: MPI calls a user-defined op as a plain function
// (invec, inoutvec, len, datatype) with no user pointer, so the callback can
// neither capture state nor reach the runtime that owns MpiTypes. The datatype
// it is given is the only clue to which conversion to use, and it must be
// compared with handles stored somewhere a free function can read. The slot
// is a function-local static (constructed on first use, nothing runs at load
// time); MpiTypes::Create() claims and fills it, the destructor clears it, and
// `claimed` keeps two MpiTypes from overwriting each other's handles. The
// handles are atomics because a callback runs on whichever thread drives MPI
// at the time (the progress of a nonblocking reduction happens inside any
// MPI_Test/MPI_Wait), which need not be the thread that ran Create().
struct HalfTypeSlot {
  std::atomic<bool> claimed{false};
  std::atomic<MPI_Datatype> float16{MPI_DATATYPE_NULL};
  std::atomic<MPI_Datatype> bfloat16{MPI_DATATYPE_NULL};
};

HalfTypeSlot& Slot() {
  static HalfTypeSlot slot;
  return slot;
}

// The MPI_User_function for `kOp` on float16/bfloat16 buffers.
template <ReduceOp kOp>
void HalfReduceCallback(void* in, void* inout, int* len, MPI_Datatype* datatype) {
  const HalfTypeSlot& slot = Slot();
  DataType dtype;
  if (*datatype == slot.float16.load(std::memory_order_acquire)) {
    dtype = DataType::kFloat16;
  } else if (*datatype == slot.bfloat16.load(std::memory_order_acquire)) {
    dtype = DataType::kBFloat16;
  } else {
    // Only MpiTypes hands these ops out, always with its own datatypes; any
    // other datatype is a bug in accord, and the callback has no way to
    // return an error. Reducing it anyway would produce silent garbage.
    ACCORD_LOG(kFatal) << "internal error: the float16/bfloat16 MPI op " << ReduceOpName(kOp)
                       << " was called with a datatype it does not know";
    std::abort();
  }
  ReduceInto(inout, in, *len, dtype, kOp);
}

Status NewHalfType(const char* name, MPI_Datatype* type) {
  ACCORD_RETURN_IF_ERROR(ACCORD_MPI_CHECK(MPI_Type_contiguous(2, MPI_BYTE, type)));
  ACCORD_RETURN_IF_ERROR(ACCORD_MPI_CHECK(MPI_Type_commit(type)));
  return ACCORD_MPI_CHECK(MPI_Type_set_name(*type, name));
}

void LogIfFailed(const Status& status) {
  if (!status.ok()) {
    ACCORD_LOG(kError) << "freeing accord's MPI datatypes/ops: " << status;
  }
}

void FreeOp(MPI_Op* op) {
  if (*op != MPI_OP_NULL) LogIfFailed(ACCORD_MPI_CHECK(MPI_Op_free(op)));
}

void FreeType(MPI_Datatype* type) {
  if (*type != MPI_DATATYPE_NULL) LogIfFailed(ACCORD_MPI_CHECK(MPI_Type_free(type)));
}

}  // namespace

Result<std::unique_ptr<MpiTypes>> MpiTypes::Create() {
  int initialized = 0;
  int finalized = 0;
  ACCORD_RETURN_IF_ERROR(ACCORD_MPI_CHECK(MPI_Initialized(&initialized)));
  ACCORD_RETURN_IF_ERROR(ACCORD_MPI_CHECK(MPI_Finalized(&finalized)));
  if (!initialized || finalized) {
    return Status::PreconditionFailed("MpiTypes::Create: MPI is not initialised");
  }
  bool expected = false;
  if (!Slot().claimed.compare_exchange_strong(expected, true)) {
    return Status::PreconditionFailed("MpiTypes::Create: another MpiTypes is alive");
  }
  std::unique_ptr<MpiTypes> types(new MpiTypes());
  types->owns_slot_ = true;
  ACCORD_RETURN_IF_ERROR(types->Init());
  return types;
}

Status MpiTypes::Init() {
  ACCORD_RETURN_IF_ERROR(NewHalfType("accord_float16", &float16_));
  ACCORD_RETURN_IF_ERROR(NewHalfType("accord_bfloat16", &bfloat16_));
  Slot().float16.store(float16_, std::memory_order_release);
  Slot().bfloat16.store(bfloat16_, std::memory_order_release);
  constexpr int kCommutative = 1;
  ACCORD_RETURN_IF_ERROR(ACCORD_MPI_CHECK(MPI_Op_create(&HalfReduceCallback<ReduceOp::kSum>, kCommutative, &sum_)));
  ACCORD_RETURN_IF_ERROR(ACCORD_MPI_CHECK(MPI_Op_create(&HalfReduceCallback<ReduceOp::kMin>, kCommutative, &min_)));
  ACCORD_RETURN_IF_ERROR(ACCORD_MPI_CHECK(MPI_Op_create(&HalfReduceCallback<ReduceOp::kMax>, kCommutative, &max_)));
  ACCORD_RETURN_IF_ERROR(
      ACCORD_MPI_CHECK(MPI_Op_create(&HalfReduceCallback<ReduceOp::kProduct>, kCommutative, &product_)));
  return Status::OK();
}

MpiTypes::~MpiTypes() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) {
    // Whoever initialised MPI (e.g. mpi4py at interpreter exit) finalised it
    // before the last reference to accord's runtime went: MPI_Finalize has
    // released these with everything else, so there is nothing to free and
    // nothing wrong.
    ACCORD_LOG(kDebug) << "MPI was finalised before accord's datatypes and ops were released; MPI_Finalize "
                          "freed them";
  } else {
    FreeOp(&sum_);
    FreeOp(&min_);
    FreeOp(&max_);
    FreeOp(&product_);
    FreeType(&float16_);
    FreeType(&bfloat16_);
  }
  if (owns_slot_) {
    Slot().float16.store(MPI_DATATYPE_NULL, std::memory_order_release);
    Slot().bfloat16.store(MPI_DATATYPE_NULL, std::memory_order_release);
    Slot().claimed.store(false, std::memory_order_release);
  }
}

MPI_Datatype MpiTypes::Datatype(DataType dtype) const {
  switch (dtype) {
    case DataType::kUInt8: return MPI_UINT8_T;
    case DataType::kInt8: return MPI_INT8_T;
    case DataType::kInt16: return MPI_INT16_T;
    case DataType::kInt32: return MPI_INT32_T;
    case DataType::kInt64: return MPI_INT64_T;
    case DataType::kFloat16: return float16_;
    case DataType::kBFloat16: return bfloat16_;
    case DataType::kFloat32: return MPI_FLOAT;
    case DataType::kFloat64: return MPI_DOUBLE;
    case DataType::kBool: return MPI_C_BOOL;
  }
  return MPI_DATATYPE_NULL;
}

MPI_Op MpiTypes::Op(ReduceOp op, DataType dtype) const {
  const bool half = dtype == DataType::kFloat16 || dtype == DataType::kBFloat16;
  const bool boolean = dtype == DataType::kBool;
  switch (op) {
    case ReduceOp::kAverage:
    case ReduceOp::kSum: return half ? sum_ : boolean ? MPI_LOR : MPI_SUM;
    case ReduceOp::kMin: return half ? min_ : boolean ? MPI_LAND : MPI_MIN;
    case ReduceOp::kMax: return half ? max_ : boolean ? MPI_LOR : MPI_MAX;
    case ReduceOp::kProduct: return half ? product_ : boolean ? MPI_LAND : MPI_PROD;
    case ReduceOp::kAdasum: break;  // not an MPI reduction (ops/adasum_op.cc)
  }
  return MPI_OP_NULL;
}

}  // namespace accord
