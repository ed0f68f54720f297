#include "daemon/criu/anon_pages.h"

#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "criu/images.pb.h"
#include "daemon/criu/image_file.h"
#include "daemon/criu/pages_pool.h"
#include "daemon/criu/pre_copy.h"
#include "daemon/store/checksum.h"
#include "gtest/gtest.h"
#include "lib/base/fs.h"
#include "test/temp_dir.h"

namespace cryo::criu {
namespace {

constexpr uint64_t kPg = 4096;

std::string PageOf(char c) { return std::string(kPg, c); }

// A child that holds the parent's memory as it was at the fork and waits to be killed: its
// pages are present (shared copy-on-write), its addresses the parent's.
class Child {
 public:
  Child() {
    pid_ = ::fork();
    if (pid_ == 0) {
      for (;;) ::pause();
    }
  }
  ~Child() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
};

::criu::vma_entry Vma(uint64_t start, uint64_t pages, uint32_t status) {
  ::criu::vma_entry v;
  v.set_start(start);
  v.set_end(start + pages * kPg);
  v.set_status(status);
  v.set_flags(MAP_PRIVATE | MAP_ANONYMOUS);
  v.set_prot(PROT_READ | PROT_WRITE);
  return v;
}

::criu::pagemap_entry Entry(uint64_t vaddr, uint32_t pages) {
  ::criu::pagemap_entry e;
  e.set_vaddr(vaddr);
  e.set_nr_pages(pages);
  e.set_flags(kPagemapPresent);
  return e;
}

// Images as the patched CRIU leaves them for task `pid`: its mappings, and CRIU's own pagemap
// entries (`criu`, with `criu_pages` as their pages).
void WriteDumpImages(const std::string& dir, pid_t pid, const std::vector<::criu::vma_entry>& vmas,
                     const std::vector<::criu::pagemap_entry>& criu,
                     const std::string& criu_pages) {
  ::criu::pstree_entry pe;
  pe.set_pid(static_cast<uint32_t>(pid));
  ASSERT_TRUE(fs::WriteFileAtomic(fs::Join(dir, "pstree.img"),
                                  FrameImage({kImgCommonMagic, kPstreeMagic}, {&pe}))
                  .ok());
  ::criu::mm_entry mm;
  for (const auto& v : vmas) *mm.add_vmas() = v;
  ASSERT_TRUE(fs::WriteFileAtomic(fs::Join(dir, absl::StrCat("mm-", pid, ".img")),
                                  FrameImage({kImgCommonMagic, kMmMagic}, {&mm}))
                  .ok());
  ::criu::pagemap_head head;
  head.set_pages_id(1);
  std::vector<const google::protobuf::MessageLite*> entries{&head};
  for (const auto& e : criu) entries.push_back(&e);
  ASSERT_TRUE(fs::WriteFileAtomic(fs::Join(dir, absl::StrCat("pagemap-", pid, ".img")),
                                  FrameImage({kImgCommonMagic, kPagemapMagic}, entries))
                  .ok());
  ASSERT_TRUE(fs::WriteFileAtomic(fs::Join(dir, "pages-1.img"), criu_pages).ok());
}

std::vector<::criu::pagemap_entry> ReadPagemap(const std::string& dir, pid_t pid) {
  auto raw =
      ReadImageEntries(dir, absl::StrCat("pagemap-", pid, ".img"), kPagemapMagic, true, 1 << 20);
  EXPECT_TRUE(raw.ok()) << raw.status();
  std::vector<::criu::pagemap_entry> out;
  if (!raw.ok() || raw->empty()) return out;
  ::criu::pagemap_head head;
  EXPECT_TRUE(head.ParseFromString((*raw)[0]));
  EXPECT_EQ(head.pages_id(), 1u);
  for (size_t i = 1; i < raw->size(); ++i) {
    out.emplace_back();
    EXPECT_TRUE(out.back().ParseFromString((*raw)[i]));
  }
  return out;
}

// Eight pages of which 0-2 and 5 were written, and two written pages made unreadable
// (PROT_NONE: the copy reads them through /proc/<pid>/mem).
struct Memory {
  Memory() {
    rw = static_cast<char*>(
        ::mmap(nullptr, 8 * kPg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    none = static_cast<char*>(
        ::mmap(nullptr, 2 * kPg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    for (int p : {0, 1, 2, 5}) std::memset(rw + p * kPg, 'a' + p, kPg);
    std::memset(none, 'x', kPg);
    std::memset(none + kPg, 'y', kPg);
    ::mprotect(none, 2 * kPg, PROT_NONE);
  }
  ~Memory() {
    ::munmap(rw, 8 * kPg);
    ::munmap(none, 2 * kPg);
  }
  uint64_t rw_at() const { return reinterpret_cast<uintptr_t>(rw); }
  uint64_t none_at() const { return reinterpret_cast<uintptr_t>(none); }
  char* rw = nullptr;
  char* none = nullptr;
};

TEST(AnonPagesTest, OnlyRegularPrivateAnonymousMappingsAreCryods) {
  const uint32_t anon = vma::kRegular | vma::kAnonPrivate;
  EXPECT_TRUE(IsExternalAnonVma(anon, MAP_PRIVATE | MAP_ANONYMOUS));
  EXPECT_TRUE(IsExternalAnonVma(anon | (1u << 1) /* stack */, MAP_PRIVATE | MAP_ANONYMOUS));
  EXPECT_FALSE(IsExternalAnonVma(anon, MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB));
  EXPECT_FALSE(IsExternalAnonVma(anon | vma::kVdso, MAP_PRIVATE));
  EXPECT_FALSE(IsExternalAnonVma(anon | vma::kAioRing, MAP_PRIVATE));
  EXPECT_FALSE(IsExternalAnonVma(anon | vma::kShadowStack, MAP_PRIVATE));
  EXPECT_FALSE(IsExternalAnonVma(vma::kRegular | vma::kFilePrivate, MAP_PRIVATE));
  EXPECT_FALSE(IsExternalAnonVma(vma::kRegular | vma::kAnonShared, MAP_SHARED));
  EXPECT_FALSE(IsExternalAnonVma(vma::kAnonPrivate, MAP_PRIVATE));  // not regular
}

TEST(AnonPagesTest, ThePagesOfTheTaskAreMergedWithCriusInAddressOrder) {
  Memory m;
  Child child;
  ASSERT_GT(child.pid(), 0);
  TempDir dir;
  const uint32_t anon = vma::kRegular | vma::kAnonPrivate;
  // CRIU's own pages: one below the mappings, one above (file-private, say).
  const uint64_t below = std::min(m.rw_at(), m.none_at()) - 64 * kPg;
  const uint64_t above = std::max(m.rw_at(), m.none_at()) + 64 * kPg;
  WriteDumpImages(dir.path, child.pid(),
                  {Vma(below, 1, vma::kRegular | vma::kFilePrivate), Vma(m.rw_at(), 8, anon),
                   Vma(m.none_at(), 2, anon), Vma(above, 1, vma::kRegular | vma::kFilePrivate)},
                  {Entry(below, 1), Entry(above, 1)}, PageOf('C') + PageOf('D'));

  auto r = WriteAnonPages(dir.path, 3);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->tasks, 1);
  EXPECT_EQ(r->left_to_criu, 0);
  EXPECT_EQ(r->bytes, 6 * kPg) << "the written pages only";

  std::vector<::criu::pagemap_entry> pm = ReadPagemap(dir.path, child.pid());
  std::vector<std::pair<uint64_t, uint32_t>> runs;
  for (const auto& e : pm) {
    runs.emplace_back(e.vaddr(), e.nr_pages());
    EXPECT_EQ(e.flags(), kPagemapPresent);
  }
  std::vector<std::pair<uint64_t, uint32_t>> want = {
      {below, 1}, {m.rw_at(), 3}, {m.rw_at() + 5 * kPg, 1}, {m.none_at(), 2}, {above, 1}};
  std::sort(want.begin(), want.end());
  EXPECT_EQ(runs, want);

  // The pages file in the same order: CRIU's pages where they were, the task's between them.
  std::string expect;
  for (const auto& [vaddr, pages] : want) {
    if (vaddr == below) expect += PageOf('C');
    if (vaddr == above) expect += PageOf('D');
    if (vaddr == m.rw_at()) expect += PageOf('a') + PageOf('b') + PageOf('c');
    if (vaddr == m.rw_at() + 5 * kPg) expect += PageOf('f');
    if (vaddr == m.none_at()) expect += PageOf('x') + PageOf('y');
  }
  auto pages = fs::ReadFile(fs::Join(dir.path, "pages-1.img"));
  ASSERT_TRUE(pages.ok()) << pages.status();
  EXPECT_TRUE(*pages == expect) << "pages file differs (" << pages->size() << " bytes, expected "
                                << expect.size() << ")";
  EXPECT_EQ(r->pagemaps, (std::vector<std::string>{absl::StrCat("pagemap-", child.pid(), ".img")}));
  // Its checksum, taken as it was copied, is the store's checksum of the file.
  ASSERT_EQ(r->pages.size(), 1u);
  auto hashed = HashFile(fs::Join(dir.path, "pages-1.img"));
  ASSERT_TRUE(hashed.ok()) << hashed.status();
  EXPECT_EQ(r->pages.at("pages-1.img"), *hashed);
}

// Written over files kept from an earlier dump (pages_pool.h), one larger and one smaller than
// the image, full of other bytes: the images hold the task's pages and nothing of those files.
TEST(AnonPagesTest, PagesImagesWrittenOverKeptFilesHoldTheTasksPagesOnly) {
  for (uint64_t kept_bytes : {64 * kPg, 2 * kPg}) {
    SCOPED_TRACE(kept_bytes);
    Memory m;
    Child child;
    ASSERT_GT(child.pid(), 0);
    TempDir dir;
    const uint32_t anon = vma::kRegular | vma::kAnonPrivate;
    WriteDumpImages(dir.path, child.pid(), {Vma(m.rw_at(), 8, anon), Vma(m.none_at(), 2, anon)}, {},
                    "");
    PagesPool pool({fs::Join(dir.path, ".pool"), 1u << 20, nullptr});
    const std::string old = fs::Join(dir.path, "old-pages");
    ASSERT_TRUE(fs::WriteFileAtomic(old, std::string(kept_bytes, 'Z')).ok());
    pool.Keep(old);
    ASSERT_EQ(pool.files(), 1);

    auto r = WriteAnonPages(dir.path, 2, nullptr, &pool);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(pool.files(), 0) << "the kept file became the image";
    auto pages = fs::ReadFile(fs::Join(dir.path, "pages-1.img"));
    ASSERT_TRUE(pages.ok()) << pages.status();
    const std::string rw = PageOf('a') + PageOf('b') + PageOf('c') + PageOf('f');
    const std::string none = PageOf('x') + PageOf('y');
    const std::string expect = m.rw_at() < m.none_at() ? rw + none : none + rw;
    EXPECT_TRUE(*pages == expect) << "pages file differs (" << pages->size() << " bytes, expected "
                                  << expect.size() << ")";
    auto hashed = HashFile(fs::Join(dir.path, "pages-1.img"));
    ASSERT_TRUE(hashed.ok()) << hashed.status();
    EXPECT_EQ(r->pages.at("pages-1.img"), *hashed);
  }
}

TEST(AnonPagesTest, APagesFileOfSeveralChecksumChunksIsHashedAsTheStoreHashesIt) {
  // 70 MiB written, a page in the middle left out: two runs, over 64 MiB of file.
  const uint64_t pages = (70ull << 20) / kPg;
  char* big = static_cast<char*>(
      ::mmap(nullptr, pages * kPg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(big, MAP_FAILED);
  for (uint64_t p = 0; p < pages; ++p) {
    if (p == pages / 2) continue;
    for (uint64_t w = 0; w < kPg / 8; ++w)
      reinterpret_cast<uint64_t*>(big + p * kPg)[w] = p * 977 + w;
  }
  {
    Child child;
    ASSERT_GT(child.pid(), 0);
    TempDir dir;
    const uint64_t at = reinterpret_cast<uintptr_t>(big);
    WriteDumpImages(dir.path, child.pid(), {Vma(at, pages, vma::kRegular | vma::kAnonPrivate)}, {},
                    "");
    auto r = WriteAnonPages(dir.path, 4);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->bytes, (pages - 1) * kPg);
    std::vector<::criu::pagemap_entry> pm = ReadPagemap(dir.path, child.pid());
    ASSERT_EQ(pm.size(), 2u);
    EXPECT_EQ(pm[0].nr_pages(), pages / 2);
    EXPECT_EQ(pm[1].vaddr(), at + (pages / 2 + 1) * kPg);
    auto hashed = HashFile(fs::Join(dir.path, "pages-1.img"));
    ASSERT_TRUE(hashed.ok()) << hashed.status();
    EXPECT_EQ(r->pages.at("pages-1.img"), *hashed);
    auto file = fs::ReadFile(fs::Join(dir.path, "pages-1.img"));
    ASSERT_TRUE(file.ok()) << file.status();
    const std::string want =
        std::string(big, (pages / 2) * kPg) +
        std::string(big + (pages / 2 + 1) * kPg, (pages - pages / 2 - 1) * kPg);
    EXPECT_TRUE(*file == want) << "the pages differ from the task's";
  }
  ::munmap(big, pages * kPg);
}

TEST(AnonPagesTest, SharedMemoryAndAMemfdLeftToCryodAreWrittenFromTheirFiles) {
  // A MAP_SHARED | MAP_ANONYMOUS segment of 4 pages (1 and 2 written), and a memfd of 3 pages
  // (page 0 written) the task only holds open.
  char* anon = static_cast<char*>(
      ::mmap(nullptr, 4 * kPg, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(anon, MAP_FAILED);
  std::memset(anon + kPg, 's', kPg);
  std::memset(anon + 2 * kPg, 't', kPg);
  const int memfd = ::memfd_create("cryo-test", 0);
  ASSERT_GE(memfd, 0);
  ASSERT_EQ(::ftruncate(memfd, 3 * kPg), 0);
  ASSERT_EQ(::pwrite(memfd, PageOf('m').data(), kPg, 0), static_cast<ssize_t>(kPg));
  struct stat anon_st, memfd_st;
  const std::string self =
      absl::StrCat("/proc/self/map_files/", absl::Hex(reinterpret_cast<uintptr_t>(anon)), "-",
                   absl::Hex(reinterpret_cast<uintptr_t>(anon) + 4 * kPg));
  ASSERT_EQ(::stat(self.c_str(), &anon_st), 0);
  ASSERT_EQ(::fstat(memfd, &memfd_st), 0);
  {
    Child child;
    ASSERT_GT(child.pid(), 0);
    TempDir dir;
    ::criu::vma_entry shared =
        Vma(reinterpret_cast<uintptr_t>(anon), 4, vma::kRegular | vma::kAnonShared);
    shared.set_shmid(anon_st.st_ino);
    shared.set_flags(MAP_SHARED | MAP_ANONYMOUS);
    WriteDumpImages(dir.path, child.pid(), {shared}, {}, "");
    ::criu::memfd_inode_entry mi;
    mi.set_name("memfd:cryo-test");
    mi.set_size(3 * kPg);
    mi.set_shmid(static_cast<uint32_t>(memfd_st.st_ino));
    ASSERT_TRUE(fs::WriteFileAtomic(fs::Join(dir.path, "memfd.img"),
                                    FrameImage({kImgCommonMagic, kMemfdInodeMagic}, {&mi}))
                    .ok());
    // As the patched CRIU leaves them: heads only, empty pages files.
    uint32_t id = 2;
    for (uint64_t shmid :
         {static_cast<uint64_t>(anon_st.st_ino), static_cast<uint64_t>(memfd_st.st_ino)}) {
      ::criu::pagemap_head head;
      head.set_pages_id(id);
      ASSERT_TRUE(
          fs::WriteFileAtomic(fs::Join(dir.path, absl::StrCat("pagemap-shmem-", shmid, ".img")),
                              FrameImage({kImgCommonMagic, kPagemapMagic}, {&head}))
              .ok());
      ASSERT_TRUE(
          fs::WriteFileAtomic(fs::Join(dir.path, absl::StrCat("pages-", id, ".img")), "").ok());
      ++id;
    }
    auto r = WriteAnonPages(dir.path, 2);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->segments, 2);
    EXPECT_EQ(r->bytes, 3 * kPg);
    auto pm = ReadImageEntries(dir.path, absl::StrCat("pagemap-shmem-", anon_st.st_ino, ".img"),
                               kPagemapMagic, true, 1 << 20);
    ASSERT_TRUE(pm.ok()) << pm.status();
    ASSERT_EQ(pm->size(), 2u);
    ::criu::pagemap_entry e;
    ASSERT_TRUE(e.ParseFromString((*pm)[1]));
    EXPECT_EQ(e.vaddr(), kPg) << "offsets in the segment";
    EXPECT_EQ(e.nr_pages(), 2u);
    auto pages = fs::ReadFile(fs::Join(dir.path, "pages-2.img"));
    ASSERT_TRUE(pages.ok());
    EXPECT_TRUE(*pages == PageOf('s') + PageOf('t'));
    pages = fs::ReadFile(fs::Join(dir.path, "pages-3.img"));
    ASSERT_TRUE(pages.ok());
    EXPECT_TRUE(*pages == PageOf('m'));
  }
  ::close(memfd);
  ::munmap(anon, 4 * kPg);
}

TEST(AnonPagesTest, ImagesOfACriuThatDumpedThePagesItselfAreLeftAsTheyAre) {
  Memory m;
  Child child;
  ASSERT_GT(child.pid(), 0);
  TempDir dir;
  // CRIU without the patch: its pagemap already covers the mapping.
  WriteDumpImages(dir.path, child.pid(), {Vma(m.rw_at(), 8, vma::kRegular | vma::kAnonPrivate)},
                  {Entry(m.rw_at(), 3)}, PageOf('a') + PageOf('b') + PageOf('c'));
  struct stat before, after;
  ASSERT_EQ(::stat(fs::Join(dir.path, "pages-1.img").c_str(), &before), 0);
  auto r = WriteAnonPages(dir.path, 2);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->tasks, 0);
  EXPECT_EQ(r->left_to_criu, 1);
  EXPECT_EQ(r->bytes, 0u);
  ASSERT_EQ(::stat(fs::Join(dir.path, "pages-1.img").c_str(), &after), 0);
  EXPECT_EQ(before.st_ino, after.st_ino) << "rewritten";
  EXPECT_EQ(ReadPagemap(dir.path, child.pid()).size(), 1u);
}

TEST(AnonPagesTest, TheTasksOfATreePlannedAtOnceEachGetTheirOwnPagesInTheTreesOrder) {
  // Each child holds the mapping as it was at its fork: 'p', 'q', 'r', 's' in turn.
  const uint64_t n = 4;
  char* mem = static_cast<char*>(
      ::mmap(nullptr, n * kPg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(mem, MAP_FAILED);
  const uint64_t at = reinterpret_cast<uintptr_t>(mem);
  const std::string letters = "pqrs";
  std::vector<std::unique_ptr<Child>> kids;
  for (char c : letters) {
    std::memset(mem, c, n * kPg);
    kids.push_back(std::make_unique<Child>());
    ASSERT_GT(kids.back()->pid(), 0);
  }
  ::munmap(mem, n * kPg);
  TempDir dir;
  std::vector<::criu::pstree_entry> tree(kids.size());
  std::vector<const google::protobuf::MessageLite*> tree_entries;
  for (size_t i = 0; i < kids.size(); ++i) {
    const pid_t pid = kids[i]->pid();
    tree[i].set_pid(static_cast<uint32_t>(pid));
    tree_entries.push_back(&tree[i]);
    ::criu::mm_entry mm;
    *mm.add_vmas() = Vma(at, n, vma::kRegular | vma::kAnonPrivate);
    ASSERT_TRUE(fs::WriteFileAtomic(fs::Join(dir.path, absl::StrCat("mm-", pid, ".img")),
                                    FrameImage({kImgCommonMagic, kMmMagic}, {&mm}))
                    .ok());
    ::criu::pagemap_head head;
    head.set_pages_id(static_cast<uint32_t>(i + 1));
    ASSERT_TRUE(fs::WriteFileAtomic(fs::Join(dir.path, absl::StrCat("pagemap-", pid, ".img")),
                                    FrameImage({kImgCommonMagic, kPagemapMagic}, {&head}))
                    .ok());
    ASSERT_TRUE(
        fs::WriteFileAtomic(fs::Join(dir.path, absl::StrCat("pages-", i + 1, ".img")), "").ok());
  }
  ASSERT_TRUE(fs::WriteFileAtomic(fs::Join(dir.path, "pstree.img"),
                                  FrameImage({kImgCommonMagic, kPstreeMagic}, tree_entries))
                  .ok());

  auto r = WriteAnonPages(dir.path, 3);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->tasks, static_cast<int>(kids.size()));
  EXPECT_EQ(r->bytes, kids.size() * n * kPg);
  std::vector<std::string> want_pagemaps;
  for (size_t i = 0; i < kids.size(); ++i) {
    want_pagemaps.push_back(absl::StrCat("pagemap-", kids[i]->pid(), ".img"));
    auto pages = fs::ReadFile(fs::Join(dir.path, absl::StrCat("pages-", i + 1, ".img")));
    ASSERT_TRUE(pages.ok()) << pages.status();
    EXPECT_TRUE(*pages == std::string(n * kPg, letters[i]))
        << "task " << i << ": its pages file is not its own memory";
  }
  EXPECT_EQ(r->pagemaps, want_pagemaps) << "the tree's order";
}

TEST(AnonPagesTest, ATaskThatIsGoneFailsTheCopy) {
  Memory m;
  pid_t gone;
  {
    Child child;
    gone = child.pid();
  }
  TempDir dir;
  WriteDumpImages(dir.path, gone, {Vma(m.rw_at(), 8, vma::kRegular | vma::kAnonPrivate)}, {}, "");
  auto r = WriteAnonPages(dir.path, 2);
  EXPECT_FALSE(r.ok());
  EXPECT_TRUE(absl::StrContains(r.status().message(), absl::StrCat("pid ", gone))) << r.status();
}

// One byte with room for one descriptor (SCM_RIGHTS), for sendmsg and recvmsg.
// WP_ASYNC, WP_UNPOPULATED and shared memory (WP_HUGETLBFS_SHMEM), as the library asks.
constexpr uint64_t kTrackFeatures = (1ull << 15) | (1ull << 13) | kUffdFeatureWpShmem;

struct OneFdMessage {
  OneFdMessage() {
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = ctl;
    msg.msg_controllen = sizeof(ctl);
  }
  OneFdMessage(const OneFdMessage&) = delete;
  OneFdMessage& operator=(const OneFdMessage&) = delete;
  char byte = 'u';
  iovec iov{&byte, 1};
  char ctl[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
};

// A child that gives the parent a userfaultfd of its own (as the fast-path library gives cryod
// one), then does what the parent asks: 'w' writes page 1 of `m.rw` ('Z') and page 6, never
// written before ('N'); 'r' maps `m.rw` anew ('Q' in pages 0 and 5); 's' writes page 2 of
// `shared` ('S') and page 6, never written before ('T'); 'f' counts a fork in `forks` (as the
// library's fork handler does). Each answered with a byte.
class TrackedChild {
 public:
  explicit TrackedChild(const Memory& m, char* shared = nullptr, uint64_t* forks = nullptr) {
    int sv[2], cmd[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0 || ::pipe(cmd) != 0) return;
    pid_ = ::fork();
    if (pid_ == 0) {
      int fd = static_cast<int>(::syscall(SYS_userfaultfd, O_CLOEXEC | UFFD_USER_MODE_ONLY));
      uffdio_api api{};
      api.api = UFFD_API;
      api.features = kTrackFeatures;
      if (fd < 0 || ::ioctl(fd, UFFDIO_API, &api) != 0) ::_exit(1);
      OneFdMessage out;
      cmsghdr* h = CMSG_FIRSTHDR(&out.msg);
      h->cmsg_level = SOL_SOCKET;
      h->cmsg_type = SCM_RIGHTS;
      h->cmsg_len = CMSG_LEN(sizeof(int));
      std::memcpy(CMSG_DATA(h), &fd, sizeof(int));
      if (::sendmsg(sv[1], &out.msg, 0) != 1) ::_exit(1);
      ::close(fd);
      char c = 0;
      while (::read(cmd[0], &c, 1) == 1) {
        if (c == 'w') {
          std::memset(m.rw + kPg, 'Z', kPg);
          std::memset(m.rw + 6 * kPg, 'N', kPg);
        } else if (c == 'r') {
          void* again = ::mmap(m.rw, 8 * kPg, PROT_READ | PROT_WRITE,
                               MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
          if (again == MAP_FAILED) ::_exit(1);
          std::memset(m.rw, 'Q', kPg);
          std::memset(m.rw + 5 * kPg, 'Q', kPg);
        } else if (c == 's') {
          std::memset(shared + 2 * kPg, 'S', kPg);
          std::memset(shared + 6 * kPg, 'T', kPg);
        } else if (c == 'f') {
          __atomic_add_fetch(forks, 1, __ATOMIC_SEQ_CST);
        }
        if (::write(sv[1], &c, 1) != 1) ::_exit(1);
      }
      ::_exit(0);
    }
    ::close(sv[1]);
    ::close(cmd[0]);
    sock_ = sv[0];
    cmd_ = cmd[1];
  }
  ~TrackedChild() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    if (sock_ >= 0) ::close(sock_);
    if (cmd_ >= 0) ::close(cmd_);
  }
  pid_t pid() const { return pid_; }
  UniqueFd TakeUffd() {
    OneFdMessage in;
    if (::recvmsg(sock_, &in.msg, 0) != 1) return UniqueFd();
    cmsghdr* h = CMSG_FIRSTHDR(&in.msg);
    if (h == nullptr || h->cmsg_type != SCM_RIGHTS) return UniqueFd();
    int fd = -1;
    std::memcpy(&fd, CMSG_DATA(h), sizeof(int));
    return UniqueFd(fd);
  }
  bool Do(char c) {
    char back = 0;
    return ::write(cmd_, &c, 1) == 1 && ::read(sock_, &back, 1) == 1 && back == c;
  }

 private:
  pid_t pid_ = -1;
  int sock_ = -1, cmd_ = -1;
};

// Task `pid`'s images of `m.rw` alone, as the patched CRIU leaves them, and cryod's copy into
// them with `ahead`.
absl::StatusOr<AnonPagesResult> DumpRwMapping(const std::string& dir, pid_t pid, const Memory& m,
                                              const PreCopy& ahead) {
  WriteDumpImages(dir, pid, {Vma(m.rw_at(), 8, vma::kRegular | vma::kAnonPrivate)}, {}, "");
  return WriteAnonPages(dir, 2, &ahead);
}

// The copy ahead, then the pages written since: those come from the task at the freeze, the
// others from the copy, and the pages file holds the task's memory as it is at the end.
TEST(PreCopyTest, PagesWrittenSinceTheCopyAheadAreTakenFromTheTaskTheRestFromTheCopy) {
  Memory m;
  TrackedChild child(m);
  ASSERT_GT(child.pid(), 0);
  UniqueFd uffd = child.TakeUffd();
  ASSERT_TRUE(uffd.ok());
  PreCopy ahead;
  ASSERT_TRUE(ahead.Add(child.pid(), std::move(uffd), 2).ok());
  const PreCopy::Task* t = ahead.Find(child.pid());
  ASSERT_NE(t, nullptr);
  EXPECT_GT(t->mappings, 0);
  const char* src = nullptr;
  ASSERT_EQ(t->Cover(m.rw_at(), 8, &src), 3u) << "pages 0-2 copied ahead in one piece";
  ASSERT_NE(src, nullptr);
  EXPECT_EQ(std::string(src, kPg), PageOf('a'));
  EXPECT_EQ(t->Cover(m.rw_at() + 3 * kPg, 5, &src), 2u) << "pages 3-4 were never written";
  EXPECT_EQ(src, nullptr);

  ASSERT_TRUE(child.Do('w'));
  TempDir dir;
  const uint32_t anon = vma::kRegular | vma::kAnonPrivate;
  WriteDumpImages(dir.path, child.pid(), {Vma(m.rw_at(), 8, anon), Vma(m.none_at(), 2, anon)}, {},
                  "");
  auto r = WriteAnonPages(dir.path, 2, &ahead);
  ASSERT_TRUE(r.ok()) << r.status();
  // Pages 0, 2 and 5 from the copy (and the two PROT_NONE pages, where the kernel tracks them);
  // 1 (rewritten) and 6 (new) from the task.
  EXPECT_GE(r->ahead_bytes, 3 * kPg);
  EXPECT_GE(r->bytes, 2 * kPg);
  EXPECT_EQ(r->ahead_bytes + r->bytes, 7 * kPg);
  std::string expect = PageOf('a') + PageOf('Z') + PageOf('c') + PageOf('f') + PageOf('N');
  expect = m.rw_at() < m.none_at() ? expect + PageOf('x') + PageOf('y')
                                   : PageOf('x') + PageOf('y') + expect;
  auto pages = fs::ReadFile(fs::Join(dir.path, "pages-1.img"));
  ASSERT_TRUE(pages.ok()) << pages.status();
  EXPECT_TRUE(*pages == expect) << "pages file differs";
  auto hashed = HashFile(fs::Join(dir.path, "pages-1.img"));
  ASSERT_TRUE(hashed.ok()) << hashed.status();
  EXPECT_EQ(r->pages.at("pages-1.img"), *hashed) << "checksummed after the thaw as a whole";
}

// Whether page `vaddr` of `pid` is write-protected for its userfaultfd (/proc/PID/pagemap bit 57).
bool WriteProtected(pid_t pid, uint64_t vaddr) {
  UniqueFd fd(::open(absl::StrCat("/proc/", pid, "/pagemap").c_str(), O_RDONLY | O_CLOEXEC));
  uint64_t e = 0;
  if (!fd.ok() || ::pread(fd.get(), &e, sizeof(e), static_cast<off_t>(vaddr / kPg * 8)) != 8) {
    ADD_FAILURE() << "pagemap of pid " << pid;
    return false;
  }
  return (e >> 57) & 1;
}

// Ending the tracking lifts the write protection from every tracked process (they are done side
// by side), keeping the copies ahead.
TEST(PreCopyTest, EndingTheTrackingLiftsTheProtectionOfEveryProcessAndKeepsTheCopies) {
  Memory m;
  TrackedChild a(m), b(m);
  ASSERT_GT(a.pid(), 0);
  ASSERT_GT(b.pid(), 0);
  PreCopy ahead;
  for (TrackedChild* c : {&a, &b}) {
    UniqueFd uffd = c->TakeUffd();
    ASSERT_TRUE(uffd.ok());
    ASSERT_TRUE(ahead.Add(c->pid(), std::move(uffd), 2).ok());
    EXPECT_TRUE(WriteProtected(c->pid(), m.rw_at())) << "tracked: page 0 protected";
  }
  ahead.StopTracking();
  for (TrackedChild* c : {&a, &b}) {
    EXPECT_FALSE(WriteProtected(c->pid(), m.rw_at())) << c->pid();
    EXPECT_FALSE(WriteProtected(c->pid(), m.rw_at() + 2 * kPg)) << c->pid();
    const PreCopy::Task* t = ahead.Find(c->pid());
    ASSERT_NE(t, nullptr);
    const char* src = nullptr;
    ASSERT_EQ(t->Cover(m.rw_at(), 8, &src), 3u) << "the copy ahead is kept";
    EXPECT_EQ(std::string(src, kPg), PageOf('a'));
    EXPECT_TRUE(c->Do('w')) << "and the process writes on";
  }
}

// A mapping made anew at the same address after the copy ahead is not tracked: all of it comes
// from the task, none from the copy of the mapping it replaced.
TEST(PreCopyTest, AMappingMadeAnewSinceTheCopyAheadIsCopiedFromTheTaskWhole) {
  Memory m;
  TrackedChild child(m);
  ASSERT_GT(child.pid(), 0);
  PreCopy ahead;
  ASSERT_TRUE(ahead.Add(child.pid(), child.TakeUffd(), 2).ok());
  ASSERT_TRUE(child.Do('r'));
  TempDir dir;
  auto r = DumpRwMapping(dir.path, child.pid(), m, ahead);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->ahead_bytes, 0u);
  EXPECT_EQ(r->bytes, 2 * kPg);
  auto pages = fs::ReadFile(fs::Join(dir.path, "pages-1.img"));
  ASSERT_TRUE(pages.ok()) << pages.status();
  EXPECT_TRUE(*pages == PageOf('Q') + PageOf('Q'));
}

// What the library would send is not a userfaultfd, or one without WP_ASYNC: nothing is tracked,
// and the freeze copies everything from the task.
TEST(PreCopyTest, ADescriptorThatTracksNothingLeavesEveryPageToTheFreeze) {
  Memory m;
  Child child;
  ASSERT_GT(child.pid(), 0);
  PreCopy ahead;
  UniqueFd not_uffd(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  ASSERT_TRUE(ahead.Add(child.pid(), std::move(not_uffd), 2).ok());
  EXPECT_EQ(ahead.bytes(), 0u);
  TempDir dir;
  auto r = DumpRwMapping(dir.path, child.pid(), m, ahead);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->ahead_bytes, 0u);
  EXPECT_EQ(r->bytes, 4 * kPg);
}

// Eight pages of anonymous shared memory (as the GPU driver's pinned host memory is), 0-2 and 5
// written, mapped before the fork, so the test's child holds it too; its images as the patched
// CRIU leaves them for that child.
struct SharedMemory {
  SharedMemory() {
    at = static_cast<char*>(
        ::mmap(nullptr, 8 * kPg, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
    for (char p : {'0', '1', '2', '5'}) std::memset(at + (p - '0') * kPg, p, kPg);
    struct stat st;
    const std::string self = absl::StrCat("/proc/self/map_files/", absl::Hex(start()), "-",
                                          absl::Hex(start() + 8 * kPg));
    if (::stat(self.c_str(), &st) == 0) shmid = st.st_ino;
  }
  ~SharedMemory() { ::munmap(at, 8 * kPg); }
  uint64_t start() const { return reinterpret_cast<uintptr_t>(at); }
  void WriteImages(const std::string& dir, pid_t pid) const {
    ::criu::vma_entry v = Vma(start(), 8, vma::kRegular | vma::kAnonShared);
    v.set_shmid(shmid);
    v.set_flags(MAP_SHARED | MAP_ANONYMOUS);
    WriteDumpImages(dir, pid, {v}, {}, "");
    ::criu::pagemap_head head;
    head.set_pages_id(2);
    ASSERT_TRUE(fs::WriteFileAtomic(fs::Join(dir, absl::StrCat("pagemap-shmem-", shmid, ".img")),
                                    FrameImage({kImgCommonMagic, kPagemapMagic}, {&head}))
                    .ok());
    ASSERT_TRUE(fs::WriteFileAtomic(fs::Join(dir, "pages-2.img"), "").ok());
  }
  char* at = nullptr;
  uint64_t shmid = 0;
};

uint64_t g_child_forks = 0;  // the child's copy is its library's fork count

// Shared memory copied ahead (after the drain, in cryod): the pages written since come from its
// file at the freeze, the rest from the copy; a fork since, or a second process holding it,
// leaves all of it to the freeze.
TEST(PreCopyTest, SharedMemoryWrittenSinceItsCopyAheadIsTakenFromItsFileAndAForkTakesNothing) {
  Memory m;
  SharedMemory sh;
  ASSERT_NE(sh.shmid, 0u);
  const std::string expect = PageOf('0') + PageOf('1') + PageOf('S') + PageOf('5') + PageOf('T');
  const auto always = [](uint64_t) { return true; };
  for (const bool forked : {false, true}) {
    SCOPED_TRACE(forked ? "forked since" : "not forked");
    std::memset(sh.at + 2 * kPg, '2', kPg);  // as before the last round's writes
    ASSERT_EQ(::madvise(sh.at + 6 * kPg, kPg, MADV_REMOVE), 0);
    TrackedChild child(m, sh.at, &g_child_forks);
    ASSERT_GT(child.pid(), 0);
    PreCopy ahead;
    ASSERT_TRUE(ahead
                    .Add(child.pid(), child.TakeUffd(), 2, kTrackFeatures,
                         reinterpret_cast<uintptr_t>(&g_child_forks))
                    .ok());
    const pid_t pid = child.pid();
    ahead.AddShared([pid] { return std::vector<pid_t>{pid}; }, 2, always);
    ASSERT_EQ(ahead.shared_segments(), 1);
    EXPECT_EQ(ahead.shared_bytes(), 4 * kPg) << "its data pages, 0-2 and 5";
    ASSERT_TRUE(child.Do('s'));
    if (forked) {
      ASSERT_TRUE(child.Do('f'));
    }
    TempDir dir;
    sh.WriteImages(dir.path, child.pid());
    auto r = WriteAnonPages(dir.path, 2, &ahead);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->segments, 1);
    EXPECT_EQ(r->ahead_bytes, forked ? 0 : 3 * kPg) << "pages 0, 1 and 5";
    EXPECT_EQ(r->bytes, forked ? 5 * kPg : 2 * kPg);
    auto pages = fs::ReadFile(fs::Join(dir.path, "pages-2.img"));
    ASSERT_TRUE(pages.ok()) << pages.status();
    EXPECT_TRUE(*pages == expect) << "pages file differs";
    auto hashed = HashFile(fs::Join(dir.path, "pages-2.img"));
    ASSERT_TRUE(hashed.ok()) << hashed.status();
    EXPECT_EQ(r->pages.at("pages-2.img"), *hashed);
  }
  // This process maps it too: a write here would not be seen.
  TrackedChild child(m, sh.at, &g_child_forks);
  PreCopy ahead;
  ASSERT_TRUE(ahead
                  .Add(child.pid(), child.TakeUffd(), 2, kTrackFeatures,
                       reinterpret_cast<uintptr_t>(&g_child_forks))
                  .ok());
  const pid_t pids[] = {child.pid(), ::getpid()};
  ahead.AddShared([&] { return std::vector<pid_t>(std::begin(pids), std::end(pids)); }, 2, always);
  EXPECT_EQ(ahead.shared_segments(), 0);
}

}  // namespace
}  // namespace cryo::criu
