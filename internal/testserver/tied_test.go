package testserver

import (
	"bufio"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// alive reports whether pid runs (a zombie does not).
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// pid (comm) state ...: comm may hold spaces, the state follows its ")".
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && s[i+2] != 'Z'
}

// A tied child outlives the thread of the goroutine that started it.
func TestStartTiedOutlivesCallerThread(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	var ended bool
	// The goroutine locks its thread and ends, which ends the thread,
	// unless it is the process's main thread, which Go keeps: then it
	// holds that thread until the test ends, and another goroutine tries.
	release := make(chan struct{})
	defer close(release)
	for range 100 {
		errc := make(chan error, 1)
		onMain := make(chan bool, 1)
		go func() {
			runtime.LockOSThread() // not unlocked: the thread ends with the goroutine
			if syscall.Gettid() == syscall.Getpid() {
				onMain <- true
				<-release
				runtime.UnlockOSThread()
				return
			}
			onMain <- false
			errc <- StartTied(cmd)
		}()
		if <-onMain {
			continue
		}
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
		ended = true
		break
	}
	if !ended {
		t.Fatal("no goroutine ran off the main thread")
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	time.Sleep(200 * time.Millisecond) // the caller's thread has ended
	if !alive(cmd.Process.Pid) {
		t.Fatal("the child died with the thread of the goroutine that started it")
	}
}

// A tied child is killed when the test process dies.
func TestStartTiedDiesWithProcess(t *testing.T) {
	if os.Getenv("TYR_TIED_HELPER") == "1" {
		cmd := exec.Command("sleep", "60")
		if err := StartTied(cmd); err != nil {
			t.Fatal(err)
		}
		os.Stdout.WriteString(strconv.Itoa(cmd.Process.Pid) + "\n")
		time.Sleep(time.Minute)
		return
	}
	pid, _ := killedHelper(t, "TestStartTiedDiesWithProcess")
	Eventually(t, 10*time.Second, "the child of a killed test process ends", func() (bool, string) {
		return !alive(pid), "pid " + strconv.Itoa(pid) + " still runs"
	})
}

// The nodes of a cluster `tyr cluster up` started for a test stop when
// the test process dies.
func TestUpClusterDownWithProcess(t *testing.T) {
	if os.Getenv("TYR_TIED_HELPER") == "1" {
		c := UpCluster(t, 1)
		os.Stdout.WriteString(strconv.Itoa(c.PIDs()[0]) + "\n")
		time.Sleep(time.Minute)
		return
	}
	pid, _ := killedHelper(t, "TestUpClusterDownWithProcess")
	Eventually(t, 30*time.Second, "the node of a killed test process's cluster stops", func() (bool, string) {
		return !alive(pid), "node pid " + strconv.Itoa(pid) + " still runs"
	})
}

// The network namespaces of a NetCluster are removed when the test
// process dies; its node, tied to the process, stops.
func TestUpNetClusterDownWithProcess(t *testing.T) {
	if os.Getenv("TYR_TIED_HELPER") == "1" {
		c := UpNetCluster(t, 1)
		os.Stdout.WriteString(strconv.Itoa(c.PIDs()[0]) + "\n")
		time.Sleep(time.Minute)
		return
	}
	if os.Geteuid() != 0 {
		t.Skip("network namespaces need root")
	}
	pid, helper := killedHelper(t, "TestUpNetClusterDownWithProcess")
	prefix := "tyr" + strconv.Itoa(helper) + "-" // the namespaces' (NetCluster.ns)
	Eventually(t, 30*time.Second, "the node and namespaces of a killed test process's cluster go", func() (bool, string) {
		if alive(pid) {
			return false, "node pid " + strconv.Itoa(pid) + " still runs"
		}
		out, err := exec.Command("ip", "netns", "list").Output()
		if err != nil {
			return false, err.Error()
		}
		for _, line := range strings.Split(string(out), "\n") {
			if strings.HasPrefix(line, prefix) {
				return false, "namespace " + line + " still there"
			}
		}
		return true, ""
	})
}

// killedHelper runs test name of this binary as a helper process, reads
// the PID it prints once ready, kills the helper with SIGKILL and returns
// the PID, which ran then, and the helper's.
func killedHelper(t *testing.T, name string) (int, int) {
	t.Helper()
	helper := exec.Command(os.Args[0], "-test.run=^"+name+"$", "-test.count=1")
	helper.Env = append(os.Environ(), "TYR_TIED_HELPER=1")
	out, err := helper.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := helper.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		_ = helper.Process.Kill()
		t.Fatalf("helper: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil || !alive(pid) {
		_ = helper.Process.Kill()
		t.Fatalf("helper's child %q: %v, alive %v", line, err, err == nil && alive(pid))
	}
	_ = helper.Process.Signal(syscall.SIGKILL)
	_ = helper.Wait()
	return pid, helper.Process.Pid
}
