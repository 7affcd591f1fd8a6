// Package nrs is the Network Request Scheduler of a PtlRPC service, as
// Lustre's NRS: it holds the requests that have arrived but that no handler
// has started yet, and decides which one a free handler runs next.
//
// A Head is one scheduler. The service's LNet event callback calls Enqueue
// for each incoming request (it never blocks: past Config.MaxQueued it
// refuses, and the service answers -EAGAIN); the service's handler
// goroutines call Get, which waits until the policy releases a request.
// Administration changes the policy and the rules at run time, while
// requests flow, without losing or repeating one.
//
// The package is pure logic: no network, no goroutines of its own, and
// time only through the Clock in Config, so tests drive TBF with a fake
// clock. It owns nothing but the queued items; it never looks at
// Item.Value.
//
// # Policies
//
// "fifo" (the default) releases requests in arrival order.
//
// "tbf", the Token Bucket Filter, rate-limits requests by rule. A rule has
// a name, a match expression, a rate in RPCs per second, and a burst: the
// depth of its token buckets (DefaultBurst unless given). Each request goes
// to the first rule, in rule order, whose expression it matches; requests
// matching none go to the built-in "default" rule (rate DefaultRate, which
// can be changed, and always last). Within its rule a request joins a
// class, and each class has its own bucket of the rule's rate and burst,
// refilled continuously, and its own FIFO. Which requests share a class
// depends on the rule's kind:
//
//	nid={...}          one class per client NID
//	jobid={...}        one class per job id (across clients)
//	opcode={...}       one class per opcode (across clients)
//	conjunctions       one class per combination of the fields tested
//	* and default      one class per client NID
//
// The policies "tbf nid", "tbf jobid" and "tbf opcode" (Lustre's TBF
// types) instead key the classes of every rule by that one field.
//
// A class may release a request when it has a token. Among the classes
// that have one, the head releases from the class whose next token became
// available earliest (earliest deadline first), oldest request first
// within a class. When no class has a token, Get sleeps until the earliest
// next token, or until an Enqueue or a rule change makes a request
// releasable sooner. TryGet ignores tokens; the service uses it to drain
// the head at shutdown.
//
// Classes are bounded: a class with no requests is kept only to remember
// its bucket, is dropped once its bucket has refilled, and at most
// MaxQueued plus the number of rules classes exist, the least recently
// used idle ones making room for new ones; so a flood of distinct clients
// cannot grow the head past its queue bound.
//
// Rules are kept whatever the policy and take effect while a TBF policy is
// active. Adding, moving or stopping a rule classifies the queued requests
// again (none is lost); changing a rate keeps each class's token debt,
// counted in tokens.
//
// # Rule syntax
//
// ParseRule reads the value of Lustre's nrs_tbf_rule parameter,
// lctl set_param ost.OSS.ost_io.nrs_tbf_rule="...":
//
//	start NAME EXPR rate=N [burst=M] [rank=OTHER]
//	change NAME [rate=N] [burst=M] [rank=OTHER]
//	stop NAME
//
// rank=OTHER places the rule just before rule OTHER (first match wins).
// EXPR is "*" (every request) or one or more conditions joined by '&' or
// spaces, each at most once:
//
//	nid={192.168.1.5@tcp 192.168.2.[1-128]@tcp 10.[0,2-3].*.*@o2ib *@tcp1 0@lo}
//	jobid={dd.0 iozone.*}              '*' matches any run of characters
//	opcode={ost_read OST_WRITE 16}     names (any case) or numbers
//
// A request matches a condition when it matches any entry of its list, and
// an expression when it matches every condition:
// "jobid={dd.*}&opcode={ost_write}" selects the writes of dd jobs. Head.Apply
// carries out a parsed command; Head.Rules lists the rules with their
// statistics.
package nrs
