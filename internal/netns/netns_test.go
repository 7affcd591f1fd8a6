package netns

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"
)

// TestMain lets the test binary act as a helper process inside a namespace:
// NETNS_HELPER=echo:ADDR serves one TCP echo, NETNS_HELPER=dial:ADDR:MSG
// sends MSG and prints the answer.
func TestMain(m *testing.M) {
	mode, arg, ok := strings.Cut(os.Getenv("NETNS_HELPER"), ":")
	if !ok {
		os.Exit(m.Run())
	}
	if err := helper(mode, arg); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(0)
}

func helper(mode, arg string) error {
	switch mode {
	case "echo":
		l, err := net.Listen("tcp", arg)
		if err != nil {
			return err
		}
		fmt.Println("listening")
		c, err := l.Accept()
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = io.Copy(c, c)
		return err
	case "dial":
		addr, msg, _ := strings.Cut(arg, "|")
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			return err
		}
		defer c.Close()
		if _, err := io.WriteString(c, msg+"\n"); err != nil {
			return err
		}
		line, err := bufio.NewReader(c).ReadString('\n')
		fmt.Print(line)
		return err
	}
	return fmt.Errorf("unknown helper mode %q", mode)
}

func TestLabCarriesTCPBetweenNamespaces(t *testing.T) {
	lab := New(t)
	a, b, c := lab.Host("a"), lab.Host("b"), lab.Host("c")
	ab := lab.Link(a, "10.254.1.1/24", b, "10.254.1.2/24")
	lab.Link(a, "10.254.2.1/24", c, "10.254.2.2/24")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	srv := b.Command(ctx, os.Args[0], "-test.run=^$")
	srv.Env = append(os.Environ(), "NETNS_HELPER=echo:"+ab.AddrB+":7777")
	out, err := srv.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer srv.Process.Kill()
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "listening\n" {
		t.Fatalf("echo server: %q %v", line, err)
	}

	cli := a.Command(ctx, os.Args[0], "-test.run=^$")
	cli.Env = append(os.Environ(), "NETNS_HELPER=dial:"+ab.AddrB+":7777|hello from a")
	got, err := cli.Output()
	if err != nil || string(got) != "hello from a\n" {
		t.Fatalf("dial from a: %q %v", got, err)
	}

	// c has no link to b: it cannot reach the echo server.
	cli = c.Command(ctx, os.Args[0], "-test.run=^$")
	cli.Env = append(os.Environ(), "NETNS_HELPER=dial:"+ab.AddrB+":7777|nope")
	if got, err := cli.Output(); err == nil {
		t.Fatalf("c reached b without a link: %q", got)
	}
}

func TestLinkDown(t *testing.T) {
	lab := New(t)
	a, b := lab.Host("a"), lab.Host("b")
	ab := lab.Link(a, "10.254.3.1/24", b, "10.254.3.2/24")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ab.SetUp(false)
	out, err := a.Command(ctx, "ip", "-o", "link", "show", ab.DevA).Output()
	if err != nil || !strings.Contains(string(out), "state DOWN") {
		t.Fatalf("link after SetUp(false): %q %v", out, err)
	}
	ab.SetUp(true)
	out, err = a.Command(ctx, "ip", "-o", "link", "show", ab.DevA).Output()
	if err != nil || strings.Contains(string(out), "state DOWN") {
		t.Fatalf("link after SetUp(true): %q %v", out, err)
	}
}
