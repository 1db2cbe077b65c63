// Lengths by address, asked for the lowest address whose length is at least n: where the model of
// expandable segments (allocator_model.h) finds room in its ranges' holes, in O(log n) instead of a
// walk of every hole (a crafted report of many holes made that walk quadratic: issue 29).
//
// A treap (a binary search tree by address, balanced by random priorities) whose every node keeps the
// largest length below it, so that the search descends one path and skips whole subtrees with too
// little room. The priorities come from a fixed generator: the shape, and so the cost, repeat.
#pragma once
#include <cstddef>
#include <cstdint>

namespace gg::whatif {

class RoomIndex {
public:
    static constexpr uint64_t kNone = UINT64_MAX;

    RoomIndex() = default;
    ~RoomIndex() { destroy(root_); }
    RoomIndex(const RoomIndex &) = delete;
    RoomIndex &operator=(const RoomIndex &) = delete;

    // Sets the length at `address` (replacing the one there).
    void set(uint64_t address, uint64_t bytes) {
        if (reset(root_, address, bytes)) return;
        Node *lo, *hi;
        split(root_, address, &lo, &hi);
        root_ = merge(merge(lo, new Node{address, bytes, bytes, next_priority()}), hi);
        size_++;
    }
    void erase(uint64_t address) {
        if (!find(address)) return;  // most runs never held unmapped space: no work for them
        Node *lo, *rest, *at, *hi;
        split(root_, address, &lo, &rest);
        split(rest, address + 1, &at, &hi);
        if (at) size_--;
        destroy(at);
        root_ = merge(lo, hi);
    }
    // The lowest address with a length of at least `bytes`, or kNone.
    uint64_t lowest_with(uint64_t bytes) const {
        if (largest(root_) < bytes) return kNone;
        for (const Node *n = root_;;) {
            if (largest(n->left) >= bytes) n = n->left;
            else if (n->bytes >= bytes) return n->address;
            else n = n->right;  // the largest below is here: never null
        }
    }
    // The length at `address`; 0 when none is set (for consistency checks).
    uint64_t at(uint64_t address) const {
        const Node *n = find(address);
        return n ? n->bytes : 0;
    }
    size_t size() const { return size_; }

private:
    struct Node {
        uint64_t address, bytes, largest, priority;
        Node *left = nullptr, *right = nullptr;
    };
    static uint64_t largest(const Node *n) { return n ? n->largest : 0; }
    const Node *find(uint64_t address) const {
        const Node *n = root_;
        while (n && n->address != address) n = address < n->address ? n->left : n->right;
        return n;
    }
    // Sets the length of the node at `address` in place, and the largest on its path; false if none.
    static bool reset(Node *n, uint64_t address, uint64_t bytes) {
        if (!n) return false;
        if (n->address == address) n->bytes = bytes;
        else if (!reset(address < n->address ? n->left : n->right, address, bytes)) return false;
        updated(n);
        return true;
    }
    static Node *updated(Node *n) {
        uint64_t below = largest(n->left) > largest(n->right) ? largest(n->left) : largest(n->right);
        n->largest = n->bytes > below ? n->bytes : below;
        return n;
    }
    // Splits `n` into the addresses below `address` and the others.
    static void split(Node *n, uint64_t address, Node **lo, Node **hi) {
        if (!n) {
            *lo = *hi = nullptr;
        } else if (n->address < address) {
            split(n->right, address, &n->right, hi);
            *lo = updated(n);
        } else {
            split(n->left, address, lo, &n->left);
            *hi = updated(n);
        }
    }
    // Joins two trees, every address of `lo` below every address of `hi`.
    static Node *merge(Node *lo, Node *hi) {
        if (!lo || !hi) return lo ? lo : hi;
        if (lo->priority > hi->priority) {
            lo->right = merge(lo->right, hi);
            return updated(lo);
        }
        hi->left = merge(lo, hi->left);
        return updated(hi);
    }
    static void destroy(Node *n) {
        if (!n) return;
        destroy(n->left);
        destroy(n->right);
        delete n;
    }
    uint64_t next_priority() {  // xorshift64
        priority_state_ ^= priority_state_ << 13;
        priority_state_ ^= priority_state_ >> 7;
        priority_state_ ^= priority_state_ << 17;
        return priority_state_;
    }

    Node *root_ = nullptr;
    size_t size_ = 0;
    uint64_t priority_state_ = 0x9e3779b97f4a7c15ull;
};

}  // namespace gg::whatif
