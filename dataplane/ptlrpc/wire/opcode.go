package wire

import "strconv"

// Opcode names the operation a request asks for; a reply carries its
// request's opcode. The values are Lustre's (enum ost_cmd, mds_cmd,
// ldlm_cmd, obd_cmd, mgs_cmd in lustre_idl.h) so traces and rules (NRS TBF
// "opcode={ost_write}") read the same as on Lustre. Every uint32 is a valid
// opcode on the wire: which ones a service handles is the service's
// business, not the codec's, and an unknown one is answered by the service
// with TypeError.
type Opcode uint32

// The opcodes Nacre knows, with Lustre's numbers.
const (
	OSTGetattr     Opcode = 1  // OST_GETATTR: object attributes
	OSTSetattr     Opcode = 2  // OST_SETATTR: set object attributes
	OSTRead        Opcode = 3  // OST_READ: bulk read, server PUTs into the client's MD
	OSTWrite       Opcode = 4  // OST_WRITE: bulk write, server GETs from the client's MD
	OSTCreate      Opcode = 5  // OST_CREATE: create objects (precreate)
	OSTDestroy     Opcode = 6  // OST_DESTROY: destroy an object
	OSTConnect     Opcode = 8  // OST_CONNECT: create an export on an OST
	OSTDisconnect  Opcode = 9  // OST_DISCONNECT: drop the export on an OST
	OSTPunch       Opcode = 10 // OST_PUNCH: truncate or punch a hole in an object
	OSTStatfs      Opcode = 13 // OST_STATFS: OST space and object counts
	OSTSync        Opcode = 16 // OST_SYNC: commit an object's data to stable storage
	OSTSetInfo     Opcode = 17 // OST_SET_INFO: a client's word about itself (KEY_GRANT_SHRINK)
	OSTLadvise     Opcode = 21 // OST_LADVISE: advice on an object's ranges (willneed, dontneed)
	OSTFallocate   Opcode = 22 // OST_FALLOCATE: reserve the blocks of an object's range
	MDSGetattr     Opcode = 33 // MDS_GETATTR: file attributes by FID
	MDSGetattrName Opcode = 34 // MDS_GETATTR_NAME: look a name up in a directory
	MDSClose       Opcode = 35 // MDS_CLOSE: close an open file handle
	MDSReint       Opcode = 36 // MDS_REINT: a namespace change (create, unlink, rename, setattr, ...)
	MDSReadpage    Opcode = 37 // MDS_READPAGE: a page of directory entries from a cookie
	MDSConnect     Opcode = 38 // MDS_CONNECT: create an export on an MDT
	MDSDisconnect  Opcode = 39 // MDS_DISCONNECT: drop the export on an MDT
	MDSGetRoot     Opcode = 40 // MDS_GET_ROOT: the root directory's FID
	MDSStatfs      Opcode = 41 // MDS_STATFS: MDT space and inode counts
	MDSSync        Opcode = 44 // MDS_SYNC: commit the MDT's changes to stable storage
	MDSGetxattr    Opcode = 49 // MDS_GETXATTR: an extended attribute, or the list of names
	MDSGetInfo     Opcode = 53 // MDS_GET_INFO: keyed queries (fid2path)
	MDSHSMStateGet Opcode = 54 // MDS_HSM_STATE_GET: a file's HSM flags, archive id and data versions
	MDSHSMStateSet Opcode = 55 // MDS_HSM_STATE_SET: set or clear HSM flags; release a file's objects
	MDSHSMProgress Opcode = 57 // MDS_HSM_PROGRESS: a copytool's completion of an archive, restore or remove
	MDSSwapLayouts Opcode = 61 // MDS_SWAP_LAYOUTS: two files exchange their objects
	// MDSChangelogClear is Nacre's: a changelog user's clear (Lustre
	// sends it as a set_info key).
	MDSChangelogClear Opcode = 520 // MDS_CHANGELOG_CLEAR: a changelog user consumed records up to an index
	LLOGNextBlock     Opcode = 502 // LLOG_ORIGIN_HANDLE_NEXT_BLOCK: changelog records from an index
	LDLMEnqueue       Opcode = 101 // LDLM_ENQUEUE: ask for a lock
	LDLMConvert       Opcode = 102 // LDLM_CONVERT: change a granted lock's mode
	LDLMCancel        Opcode = 103 // LDLM_CANCEL: give locks back
	LDLMBlCallback    Opcode = 104 // LDLM_BL_CALLBACK: server asks a holder to release a lock
	LDLMCpCallback    Opcode = 105 // LDLM_CP_CALLBACK: server tells a waiter its lock is granted
	LDLMGlCallback    Opcode = 106 // LDLM_GL_CALLBACK: server asks a holder for its view (size, mtime)
	MGSConnect        Opcode = 250 // MGS_CONNECT: connect to the MGS
	OBDPing           Opcode = 400 // OBD_PING: liveness and last_committed exchange
	SEQQuery          Opcode = 700 // SEQ_QUERY: grant a FID sequence
	FLDQuery          Opcode = 900 // FLD_QUERY: which target a FID sequence lives on
)

// opcodeNames holds Lustre's name for each known opcode.
var opcodeNames = map[Opcode]string{
	OSTGetattr:        "OST_GETATTR",
	OSTSetattr:        "OST_SETATTR",
	OSTRead:           "OST_READ",
	OSTWrite:          "OST_WRITE",
	OSTCreate:         "OST_CREATE",
	OSTDestroy:        "OST_DESTROY",
	OSTConnect:        "OST_CONNECT",
	OSTDisconnect:     "OST_DISCONNECT",
	OSTPunch:          "OST_PUNCH",
	OSTFallocate:      "OST_FALLOCATE",
	OSTStatfs:         "OST_STATFS",
	OSTSync:           "OST_SYNC",
	OSTSetInfo:        "OST_SET_INFO",
	OSTLadvise:        "OST_LADVISE",
	MDSGetattr:        "MDS_GETATTR",
	MDSGetattrName:    "MDS_GETATTR_NAME",
	MDSClose:          "MDS_CLOSE",
	MDSReint:          "MDS_REINT",
	MDSReadpage:       "MDS_READPAGE",
	MDSConnect:        "MDS_CONNECT",
	MDSDisconnect:     "MDS_DISCONNECT",
	MDSGetRoot:        "MDS_GET_ROOT",
	MDSStatfs:         "MDS_STATFS",
	MDSSync:           "MDS_SYNC",
	MDSGetxattr:       "MDS_GETXATTR",
	MDSGetInfo:        "MDS_GET_INFO",
	MDSHSMStateGet:    "MDS_HSM_STATE_GET",
	MDSHSMStateSet:    "MDS_HSM_STATE_SET",
	MDSHSMProgress:    "MDS_HSM_PROGRESS",
	MDSSwapLayouts:    "MDS_SWAP_LAYOUTS",
	MDSChangelogClear: "MDS_CHANGELOG_CLEAR",
	LLOGNextBlock:     "LLOG_ORIGIN_HANDLE_NEXT_BLOCK",
	LDLMEnqueue:       "LDLM_ENQUEUE",
	LDLMConvert:       "LDLM_CONVERT",
	LDLMCancel:        "LDLM_CANCEL",
	LDLMBlCallback:    "LDLM_BL_CALLBACK",
	LDLMCpCallback:    "LDLM_CP_CALLBACK",
	LDLMGlCallback:    "LDLM_GL_CALLBACK",
	MGSConnect:        "MGS_CONNECT",
	OBDPing:           "OBD_PING",
	SEQQuery:          "SEQ_QUERY",
	FLDQuery:          "FLD_QUERY",
}

// String returns Lustre's name for a known opcode ("OST_WRITE",
// "LDLM_ENQUEUE") and the decimal number for any other ("777"). It does not
// allocate for known opcodes.
func (o Opcode) String() string {
	if s, ok := opcodeNames[o]; ok {
		return s
	}
	return strconv.FormatUint(uint64(o), 10)
}

// Known reports whether o is one of the opcodes named in this package.
// Unknown opcodes are still valid on the wire.
func (o Opcode) Known() bool {
	_, ok := opcodeNames[o]
	return ok
}
