//! Pickle opcodes, as CPython's `Lib/pickle.py` names them.

pub const MARK: u8 = b'(';
pub const STOP: u8 = b'.';
pub const POP: u8 = b'0';
pub const POP_MARK: u8 = b'1';
pub const DUP: u8 = b'2';
pub const BININT: u8 = b'J';
pub const BININT1: u8 = b'K';
pub const BININT2: u8 = b'M';
pub const NONE: u8 = b'N';
pub const BINUNICODE: u8 = b'X';
pub const BINFLOAT: u8 = b'G';
pub const BINBYTES: u8 = b'B';
pub const SHORT_BINBYTES: u8 = b'C';
pub const BINSTRING: u8 = b'T';
pub const SHORT_BINSTRING: u8 = b'U';
pub const APPEND: u8 = b'a';
pub const APPENDS: u8 = b'e';
pub const EMPTY_DICT: u8 = b'}';
pub const EMPTY_LIST: u8 = b']';
pub const EMPTY_TUPLE: u8 = b')';
pub const SETITEM: u8 = b's';
pub const SETITEMS: u8 = b'u';
pub const TUPLE: u8 = b't';
pub const GET: u8 = b'g';
pub const BINGET: u8 = b'h';
pub const LONG_BINGET: u8 = b'j';
pub const PUT: u8 = b'p';
pub const BINPUT: u8 = b'q';
pub const LONG_BINPUT: u8 = b'r';
pub const PROTO: u8 = 0x80;
pub const TUPLE1: u8 = 0x85;
pub const TUPLE2: u8 = 0x86;
pub const TUPLE3: u8 = 0x87;
pub const NEWTRUE: u8 = 0x88;
pub const NEWFALSE: u8 = 0x89;
pub const LONG1: u8 = 0x8a;
pub const LONG4: u8 = 0x8b;
pub const SHORT_BINUNICODE: u8 = 0x8c;
pub const BINUNICODE8: u8 = 0x8d;
pub const BINBYTES8: u8 = 0x8e;
pub const MEMOIZE: u8 = 0x94;
pub const FRAME: u8 = 0x95;
pub const BYTEARRAY8: u8 = 0x96;

/// Opcodes that import a global, call an object or hand data to an external resolver.
/// Reading any of them could run code in a Python unpickler, so vramtrace refuses them.
pub fn code_executing(op: u8) -> Option<&'static str> {
    Some(match op {
        b'c' => "GLOBAL",
        0x93 => "STACK_GLOBAL",
        b'R' => "REDUCE",
        b'b' => "BUILD",
        b'i' => "INST",
        b'o' => "OBJ",
        0x81 => "NEWOBJ",
        0x92 => "NEWOBJ_EX",
        0x82 => "EXT1",
        0x83 => "EXT2",
        0x84 => "EXT4",
        b'P' => "PERSID",
        b'Q' => "BINPERSID",
        0x97 => "NEXT_BUFFER",
        0x98 => "READONLY_BUFFER",
        _ => return None,
    })
}

/// Harmless opcodes this reader does not implement: text protocols 0 and 1, and sets, none of
/// which `pickle.dump` emits for a PyTorch snapshot.
pub fn unsupported(op: u8) -> Option<&'static str> {
    Some(match op {
        b'I' => "INT",
        b'L' => "LONG",
        b'F' => "FLOAT",
        b'S' => "STRING",
        b'V' => "UNICODE",
        b'l' => "LIST",
        b'd' => "DICT",
        0x8f => "EMPTY_SET",
        0x90 => "ADDITEMS",
        0x91 => "FROZENSET",
        _ => return None,
    })
}
