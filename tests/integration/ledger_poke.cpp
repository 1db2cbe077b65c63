// Writes into a ledger file what a killed or foreign process could leave there, for the tests of
// issue 18 (t_hostile.sh): slots a claimer was killed in the middle of claiming, and reads them back.
//   ledger_poke FILE claiming-all PID   every slot in the state "claiming" by PID, as 512 claimers
//                                      SIGKILLed between taking a slot and marking it live leave it
//   ledger_poke FILE live-to-new-page PID   slots from 1 on live, owned by PID (a joiner passes over
//                                      them), up to the first whose bytes begin on a page that no
//                                      earlier write touched: the next joiner's slot (its index printed)
//   ledger_poke FILE hold-slots FROM TO   slots [FROM, TO) live and held, as live processes hold them
//                                      (an OFD lock on their bytes), until stdin closes; "ready" once
//                                      they are (one process standing for many: a lock is per open file
//                                      description, not per process)
//   ledger_poke FILE states            one line: how many slots are in each state
#include <fcntl.h>
#include <stddef.h>
#include <sys/mman.h>
#include <unistd.h>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "common/ledger/layout.h"

using namespace gg::ledger;

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr,
                "usage: ledger_poke FILE claiming-all PID | live-to-new-page PID | hold-slots FROM TO | states\n");
        return 2;
    }
    int fd = open(argv[1], O_RDWR | O_CLOEXEC);
    void *p = fd < 0 ? MAP_FAILED : mmap(nullptr, sizeof(Header), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
        perror(argv[1]);
        return 2;
    }
    Header *h = static_cast<Header *>(p);
    if (!strcmp(argv[2], "claiming-all") && argc == 4) {
        for (Slot &s : h->slots) {
            s.pid.store(atoi(argv[3]));
            s.state.store(kSlotClaiming);
        }
        h->slot_high.store(kMaxSlots);
        return 0;
    }
    if (!strcmp(argv[2], "live-to-new-page") && argc == 4) {
        auto page = [h](const void *p) { return ((const char *)p - (const char *)h) / 4096; };
        int to = 2;
        while (to < kMaxSlots && (page(&h->slots[to]) == page(&h->slots[to - 1]) ||
                                  page(&h->slots[to]) <= page(&h->slots[0].peak[kMaxDevices - 1])))
            to++;
        for (int i = 1; i < to; i++) {
            h->slots[i].pid.store(atoi(argv[3]));
            h->slots[i].state.store(kSlotLive);
        }
        if (h->slot_high.load() < (uint32_t)to) h->slot_high.store((uint32_t)to);
        printf("%d\n", to);
        return 0;
    }
    if (!strcmp(argv[2], "hold-slots") && argc == 5) {
        int from = atoi(argv[3]), to = atoi(argv[4]);
        if (from < 0 || to > kMaxSlots || from >= to) return 2;
        struct flock fl;
        memset(&fl, 0, sizeof fl);
        fl.l_type = F_WRLCK;
        fl.l_whence = SEEK_SET;
        fl.l_start = (off_t)(offsetof(Header, slots) + (size_t)from * sizeof(Slot));
        fl.l_len = (off_t)((size_t)(to - from) * sizeof(Slot));
        if (fcntl(fd, F_OFD_SETLK, &fl) != 0) {
            perror("ledger_poke: F_OFD_SETLK");
            return 2;
        }
        for (int i = from; i < to; i++) {
            h->slots[i].pid.store(getpid());
            h->slots[i].state.store(kSlotLive);
        }
        if (h->slot_high.load() < (uint32_t)to) h->slot_high.store((uint32_t)to);
        printf("ready\n");
        fflush(stdout);
        char buf[64];
        while (read(0, buf, sizeof buf) > 0) {}
        return 0;
    }
    if (!strcmp(argv[2], "states")) {
        int n[8] = {};
        for (const Slot &s : h->slots) n[s.state.load() < 8 ? s.state.load() : 7]++;
        printf("free=%d claiming=%d live=%d reclaiming=%d reclaimed=%d other=%d\n", n[0], n[1], n[2], n[3], n[4],
               n[5] + n[6] + n[7]);
        return 0;
    }
    fprintf(stderr, "ledger_poke: unknown command %s\n", argv[2]);
    return 2;
}
