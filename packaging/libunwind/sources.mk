# The files of libunwind.so.8 for x86-64 Linux, local unwinding only, as libunwind's src/Makefile.am
# lists them for that configuration (paths under its src/).
UNWIND_SOURCES := \
  os-linux.c dl-iterate-phdr.c \
  mi/init.c mi/flush_cache.c mi/mempool.c mi/strerror.c \
  x86_64/is_fpreg.c x86_64/regname.c x86_64/Los-linux.c \
  mi/backtrace.c mi/dyn-cancel.c mi/dyn-info-list.c mi/dyn-register.c \
  mi/Ldyn-extract.c mi/Lfind_dynamic_proc_info.c mi/Lget_accessors.c mi/Lget_proc_info_by_ip.c \
  mi/Lget_proc_name.c mi/Lput_dynamic_unwind_info.c mi/Ldestroy_addr_space.c mi/Lget_reg.c mi/Lset_reg.c \
  mi/Lget_fpreg.c mi/Lset_fpreg.c mi/Lset_caching_policy.c mi/Lset_cache_size.c \
  x86_64/setcontext.S x86_64/getcontext.S \
  x86_64/Lapply_reg_state.c x86_64/Lreg_states_iterate.c x86_64/Lcreate_addr_space.c x86_64/Lget_save_loc.c \
  x86_64/Lglobal.c x86_64/Linit.c x86_64/Linit_local.c x86_64/Linit_remote.c x86_64/Lget_proc_info.c \
  x86_64/Lregs.c x86_64/Lresume.c x86_64/Lstash_frame.c x86_64/Lstep.c x86_64/Ltrace.c \
  dwarf/Lexpr.c dwarf/Lfde.c dwarf/Lparser.c dwarf/Lpe.c dwarf/Lfind_proc_info-lsb.c dwarf/Lfind_unwind_table.c \
  dwarf/global.c \
  elf64.c
