//! Operator overloads: `+ - * / %` between tensors (owned or borrowed) and with `f32` / `i32`
//! literals on either side, and unary `-`.

use crate::dtype::Scalar;
use crate::ops::{BinaryOp, UnaryOp};
use crate::tensor::Tensor;

macro_rules! binop {
    ($tr:ident, $m:ident, $op:expr) => {
        impl std::ops::$tr<&Tensor> for &Tensor {
            type Output = Tensor;
            fn $m(self, o: &Tensor) -> Tensor {
                self.binary($op, o)
            }
        }
        impl std::ops::$tr<Tensor> for Tensor {
            type Output = Tensor;
            fn $m(self, o: Tensor) -> Tensor {
                self.binary($op, &o)
            }
        }
        impl std::ops::$tr<&Tensor> for Tensor {
            type Output = Tensor;
            fn $m(self, o: &Tensor) -> Tensor {
                self.binary($op, o)
            }
        }
        impl std::ops::$tr<Tensor> for &Tensor {
            type Output = Tensor;
            fn $m(self, o: Tensor) -> Tensor {
                self.binary($op, &o)
            }
        }
        impl std::ops::$tr<f32> for &Tensor {
            type Output = Tensor;
            fn $m(self, o: f32) -> Tensor {
                self.binary_scalar($op, o as f64, false)
            }
        }
        impl std::ops::$tr<f32> for Tensor {
            type Output = Tensor;
            fn $m(self, o: f32) -> Tensor {
                self.binary_scalar($op, o as f64, false)
            }
        }
        impl std::ops::$tr<i32> for &Tensor {
            type Output = Tensor;
            fn $m(self, o: i32) -> Tensor {
                self.binary_literal($op, Scalar::I32(o), false)
            }
        }
        impl std::ops::$tr<i32> for Tensor {
            type Output = Tensor;
            fn $m(self, o: i32) -> Tensor {
                self.binary_literal($op, Scalar::I32(o), false)
            }
        }
        impl std::ops::$tr<&Tensor> for i32 {
            type Output = Tensor;
            fn $m(self, o: &Tensor) -> Tensor {
                o.binary_literal($op, Scalar::I32(self), true)
            }
        }
        impl std::ops::$tr<&Tensor> for f32 {
            type Output = Tensor;
            fn $m(self, o: &Tensor) -> Tensor {
                o.binary_scalar($op, self as f64, true)
            }
        }
        impl std::ops::$tr<Tensor> for f32 {
            type Output = Tensor;
            fn $m(self, o: Tensor) -> Tensor {
                o.binary_scalar($op, self as f64, true)
            }
        }
    };
}
binop!(Add, add, BinaryOp::Add);
binop!(Sub, sub, BinaryOp::Sub);
binop!(Mul, mul, BinaryOp::Mul);
binop!(Div, div, BinaryOp::Div);
binop!(Rem, rem, BinaryOp::Rem);

impl std::ops::Neg for &Tensor {
    type Output = Tensor;
    fn neg(self) -> Tensor {
        self.unary(UnaryOp::Neg)
    }
}
impl std::ops::Neg for Tensor {
    type Output = Tensor;
    fn neg(self) -> Tensor {
        self.unary(UnaryOp::Neg)
    }
}
