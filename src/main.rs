fn main() {
    println!("rigrun: under construction");
}
