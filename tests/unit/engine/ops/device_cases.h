// One definition per op test, run on every device this machine has (the idea of llama.cpp's
// test-backend-ops): a case makes its inputs on the host together with the f64 values they hold,
// runs the op on a device with its tensors there, and compares the result with an f64 reference
// under the tolerance that device's arithmetic allows (each case says which, and why).
//
// The CPU always runs. A GPU runs where one is usable; where none is, each case prints which
// device it left out and why. That is not a skip: the CPU half ran and was checked, so CTest
// counts the case by its CPU result, and scripts/gpu-check.sh runs the same binary on a GPU.
#pragma once

#include <catch2/catch.hpp>
#include <functional>
#include <vector>

#include "engine/core/device.h"
#include "engine/core/tensor.h"
#include "tests/unit/engine/cuda_test_util.h"
#include "tests/unit/engine/llm/op_test_util.h"

namespace framezip::engine::test {

// The CPU, then the first GPU when one is usable.
std::vector<Device> DevicesPresent();

// Runs `body` once per device present, each with the device named in Catch's messages; afterwards
// prints the devices left out ("cuda:0 not run: <reason>").
void ForEachDevice(const std::function<void(const Device&)>& body);

// A copy of a host tensor on `device` (an undefined tensor stays undefined: an absent bias).
Tensor On(const Tensor& host, const Device& device);

// A tensor on `device` filled with NaN, so an element the op never writes fails any comparison.
Tensor PoisonedOn(Shape shape, const Device& device, DType dtype = DType::kF32);

// |got − want| <= tol.abs + tol.rel·|want| everywhere; got may live on any device.
void CheckCloseTo(const Tensor& got, const std::vector<double>& want, testing::Tolerance tol);

// For outputs whose scale the data sets (sums over K): every element within element·RMS(want),
// and ‖got − want‖ / ‖want‖ <= l2.
void CheckWithinRmsOf(const Tensor& got, const std::vector<double>& want, RmsTolerance tol);

// The f64 values a 16-bit rounding of `values` holds (bf16 or f16; f32 rounds to f32).
std::vector<double> RoundedTo(const std::vector<double>& values, DType dtype);

}  // namespace framezip::engine::test
