// CRC32C (Castagnoli, the iSCSI polynomial 0x1EDC6F41, reflected), the checksum of every block the
// store keeps (on the wire, per disk record, per Redis value) and of the engine's KV page codec.
//
// Uses the SSE4.2 crc32 instruction when the CPU has it (checked once at run time) and a
// slicing-by-8 table otherwise; both give identical results (RFC 3720 B.4 vectors in the tests).
// Thread-safe, no allocation.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace framezip {

// Continues a CRC32C: Crc32cExtend(Crc32cExtend(0, a), b) == Crc32c(a + b). Start from 0.
uint32_t Crc32cExtend(uint32_t crc, const void* data, size_t size);

inline uint32_t Crc32c(const void* data, size_t size) { return Crc32cExtend(0, data, size); }
inline uint32_t Crc32c(std::string_view bytes) { return Crc32c(bytes.data(), bytes.size()); }

// The portable table implementation, exposed so tests can compare it with the hardware path.
uint32_t Crc32cExtendPortable(uint32_t crc, const void* data, size_t size);

// True when Crc32cExtend uses the SSE4.2 instruction on this CPU.
bool Crc32cUsesHardware();

}  // namespace framezip
