// Fuzz target: the caching walker's reader of .eh_frame entries (shim/stacks/cfi_walker.cpp): the CIE's
// header and augmentation, the FDE's fields, and the call-frame program run up to an address.
// .eh_frame comes from loaded libraries, not from users, but a reader that trusts a length or a
// NUL it did not check would fault in someone's training job on the first odd library; so any
// bytes in a well-formed pair of entries must give one of the three answers, never a read outside
// the entries, undefined behaviour or a hang.
//
// Input: u8 pc offset into the function, u8 length of the CIE's body, the CIE's body (version,
// augmentation, alignments, return register, augmentation data, initial instructions), then the
// FDE's body (function start and length, augmentation data, instructions). The harness writes the
// two entries' lengths, the CIE id and the FDE's pointer to its CIE, into a buffer of exactly their
// size (so that AddressSanitizer sees any read past them).
#include <cstdint>
#include <cstring>
#include <vector>

#include "fuzz_require.h"
#include "shim/stacks/cfi_walker.h"

namespace {

void put32(std::vector<uint8_t> &v, uint32_t x) {
    uint8_t b[4];
    memcpy(b, &x, 4);
    v.insert(v.end(), b, b + 4);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2) return 0;
    uint8_t pc_offset = data[0];
    size_t cie_body = data[1];
    data += 2, size -= 2;
    if (cie_body > size) cie_body = size;
    size_t fde_body = size - cie_body;

    std::vector<uint8_t> buf;
    put32(buf, uint32_t(4 + cie_body));  // CIE: length, id 0, body
    put32(buf, 0);
    buf.insert(buf.end(), data, data + cie_body);
    size_t fde_at = buf.size();
    put32(buf, uint32_t(4 + fde_body));  // FDE: length, pointer back to the CIE, body
    put32(buf, uint32_t(fde_at + 4));
    buf.insert(buf.end(), data + cie_body, data + size);

    const uintptr_t start = 0x400000;
    int kind = gg::stacks::cfi::rule_kind_of_entry(buf.data() + fde_at, start, start + pc_offset);
    FUZZ_REQUIRE(kind >= 0 && kind <= 2);
    return 0;
}
